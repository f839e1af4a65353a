// Command durable is the operator's tool for durable stores.
//
// Usage:
//
//	durable <command> [flags]
//
// Commands:
//
//	migrate   apply, roll back, show or force the Postgres schema version, or print its SQL
//	cleanup   delete expired and old records in batches
//	inspect   print one workflow, idempotency key or lease, or list workflows
//	delete    delete one workflow, idempotency key or lease (e.g. a corrupt one)
//	doctor    check connectivity, schema, clock skew and LISTEN support
//	bench     run a mixed workload and report throughput and latency
//	ui        serve the web console (read-only unless --allow-actions)
//	version   print the version of durable and of Go it was built with
//
// Flags may come before or after a command's arguments ("--" ends them):
// "durable inspect workflow order-42 --tenant acme --json" works as
// written.
//
// Exit codes, the same for every command: 0 success, 1 failure, 2 usage
// error, 3 the schema needs attention (missing, behind, dirty or newer than
// this binary).
//
// Every command takes --dsn, or reads DURABLE_DSN when the flag is absent.
// Run "durable <command> --help" for the flags of one command.
//
// The global flag --verbose (-v), before or after the command name, prints
// below a failure's one-line message its cause chain: the Go type of every
// error in it and, for a PostgreSQL server error, the SQLSTATE, its
// condition name, the severity and the server's message, detail and hint.
// A password of the DSN is masked wherever it would appear.
//
// The CLI reads no DSN itself: every command opens the store with
// durable.Open, whose backend parses the DSN exactly as it does for the
// application, and the schema commands ask the backend they got for what
// they need (see capabilities.go). Only --verbose looks into a DSN, to
// mask its passwords in what it prints.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
	"github.com/durable-go/durable/backends/postgres"
	_ "github.com/durable-go/durable/backends/redis"
	_ "github.com/durable-go/durable/backends/sqlite"
	"github.com/durable-go/durable/contract"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env *env) error
}

// env carries the streams of one invocation so that tests can capture them.
type env struct {
	stdout, stderr io.Writer
	verbose        bool // --verbose: print the cause chain of a failure
}

func commands() []command {
	return []command{
		{"migrate", "apply, roll back, show or force the Postgres schema version, or print its SQL", runMigrate},
		{"cleanup", "delete expired and old records in batches", runCleanup},
		{"inspect", "print one workflow, idempotency key or lease, or list workflows", runInspect},
		{"delete", "delete one workflow, idempotency key or lease (e.g. a corrupt one)", runDelete},
		{"doctor", "check connectivity, schema, clock skew and LISTEN support", runDoctor},
		{"bench", "run a mixed workload and report throughput and latency", runBench},
		{"ui", "serve the web console (read-only unless --allow-actions)", runUI},
		{"version", "print the version of durable and of Go it was built with", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: durable <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s  %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command takes --dsn or reads DURABLE_DSN. Run 'durable <command> --help' for its flags.")
	fmt.Fprintln(w, "Flags may come before or after a command's arguments; \"--\" ends them.")
	fmt.Fprintln(w, "Global flags: -v, --verbose  on failure, print the cause chain (error types, SQLSTATE, server message).")
	fmt.Fprintln(w, "Every command takes --json (after its name): exactly one JSON document on stdout.")
	fmt.Fprintln(w)
	fmt.Fprint(w, exitCodesText)
}

// Exit codes, the same for every command.
const (
	exitOK     = 0 // success
	exitFail   = 1 // the command failed (unreachable database, record not found, a failed check, ...)
	exitUsage  = 2 // a mistake in the command line
	exitSchema = 3 // the schema needs attention: missing, behind, dirty or newer than this binary
)

// exitCodesText documents the exit codes in every --help.
const exitCodesText = `exit codes:
  0  success
  1  failure (database unreachable, record not found, a doctor check failed, ...)
  2  usage error (unknown command or flag, missing argument, no DSN)
  3  the schema needs attention: missing, behind, dirty or newer than this
     binary (migrate status, doctor, or any command whose store refuses to open)
`

// run executes one invocation and returns the process exit code (see
// exitCodesText).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	for len(args) > 0 && isVerboseFlag(args[0]) {
		e.verbose = true
		args = args[1:]
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		out := &countingWriter{w: stdout}
		e.stdout = out
		err := c.run(ctx, args[1:], e)
		code := exitCode(err)
		if err != nil && code != exitOK && out.n == 0 && wantsJSON(args[1:]) {
			// --json promises one document on stdout, a failure included.
			kind := contract.CodeOf(err).String()
			if code == exitUsage {
				kind = "usage"
			}
			_ = writeJSON(e, errorOut{Error: redact(err.Error(), secrets(args[1:])), Code: kind, ExitCode: code})
		}
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "durable %s: %v\n", name, err)
			fmt.Fprintf(stderr, "run 'durable %s --help' for usage\n", name)
			return 2
		default:
			fmt.Fprintf(stderr, "durable %s: %v\n", name, err)
			if h := hint(err); h != "" {
				fmt.Fprintf(stderr, "hint: %s\n", h)
			}
			if e.verbose {
				printCauses(stderr, err, secrets(args[1:]))
			}
			return code
		}
	}
	fmt.Fprintf(stderr, "durable: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// hint suggests what to do about err. It never repeats the DSN.
func hint(err error) string {
	switch contract.CodeOf(err) {
	case contract.Unavailable, contract.OutcomeUnknown:
		return "check that the database is running and reachable, and the host, port and credentials in the DSN"
	case contract.SchemaMismatch:
		return "run 'durable migrate status'; 'durable migrate up' applies missing migrations"
	case contract.InvalidArgument:
		return "check the DSN's scheme and parameters and the command's arguments"
	case contract.NotFound:
		return "check the id and the --scope or --tenant flag"
	case contract.Unimplemented:
		return "this backend does not support the command"
	case contract.PermissionDenied, contract.Misconfigured:
		return "retrying will not help until the configuration is fixed as the message says; --verbose shows the server's own message"
	case contract.Corrupt:
		if ref, ok := contract.CorruptRecord(err); ok {
			scope := ""
			if ref.Scope != "" {
				scope = " --scope " + string(ref.Scope)
			}
			return fmt.Sprintf("the stored %s %s cannot be decoded; remove it with 'durable delete %s %s%s --yes'", ref.Kind, ref.ID, ref.Kind, ref.ID, scope)
		}
		return "the stored record cannot be decoded; remove it with 'durable delete KIND ID --yes' (same --scope or --tenant)"
	}
	return ""
}

// newFlags returns a flag set with the --dsn flag every command shares.
func newFlags(e *env, name, args, about string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	dsn := fs.String("dsn", "", "store DSN, e.g. postgres://user@host/db (default $DURABLE_DSN)")
	fs.BoolVar(&e.verbose, "verbose", e.verbose, "on failure, print the cause chain (error types, SQLSTATE, server message)")
	fs.BoolVar(&e.verbose, "v", e.verbose, "short for --verbose")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: durable %s [flags] %s\n\n%s\n\nFlags may come before or after the arguments; \"--\" ends them.\n\nflags:\n", name, args, about)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output())
		fmt.Fprint(fs.Output(), exitCodesText)
	}
	return fs, dsn
}

// parse parses args, flags before, between and after the positional
// arguments: the standard flag package stops at the first non-flag, so
// parse takes it as a positional and goes on with the rest. "--" ends the
// flags: everything after it is positional. --help returns flag.ErrHelp
// after printing usage to stdout. The positionals are fs.Args() afterwards.
func parse(fs *flag.FlagSet, e *env, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(e.stdout)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	var positional []string
	rest := args
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return usageError{err.Error()}
		}
		left := fs.Args()
		if used := len(rest) - len(left); used > 0 && rest[used-1] == "--" {
			positional = append(positional, left...) // terminator: all the rest
			break
		}
		if len(left) == 0 {
			break
		}
		positional = append(positional, left[0])
		rest = left[1:]
	}
	// Leave the positionals in fs.Args(): parsing "--" first sets no flag.
	if err := fs.Parse(append([]string{"--"}, positional...)); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

func resolveDSN(flagValue string) (string, error) {
	dsn := strings.TrimSpace(flagValue)
	if dsn == "" {
		dsn = strings.TrimSpace(os.Getenv("DURABLE_DSN"))
	}
	if dsn == "" {
		return "", usagef("no DSN: pass --dsn or set DURABLE_DSN")
	}
	return dsn, nil
}

func openStore(ctx context.Context, dsnFlag string, opts ...durable.Option) (*durable.Store, error) {
	dsn, err := resolveDSN(dsnFlag)
	if err != nil {
		return nil, err
	}
	return durable.Open(ctx, dsn, opts...)
}

// --- --verbose ---

// isVerboseFlag reports whether a is the global --verbose flag.
func isVerboseFlag(a string) bool {
	switch a {
	case "-v", "--v", "-verbose", "--verbose":
		return true
	}
	return false
}

// printCauses writes the cause chain of err, one error a line, indented by
// depth: its Go type and, for a PostgreSQL server error, the SQLSTATE, its
// condition name, the severity and the server's message, detail and hint;
// for any other error its own text (what it adds to the errors it wraps).
// Every string of secrets is masked in what is printed.
func printCauses(w io.Writer, err error, secrets []string) {
	fmt.Fprintln(w, "cause chain:")
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		if e == nil || depth > 32 {
			return
		}
		indent := strings.Repeat("  ", depth+1)
		var kids []error
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if k := u.Unwrap(); k != nil {
				kids = []error{k}
			}
		case interface{ Unwrap() []error }:
			kids = u.Unwrap()
		}
		line := fmt.Sprintf("%s%T", indent, e)
		var server []string // label, text pairs
		ce, isContract := e.(*contract.Error)
		se, isServer := postgres.ServerErrorOf(e)
		switch {
		case isContract:
			line += ": code " + ce.Code.String()
		case isServer:
			line += ": " + describeServerError(se)
			server = []string{"message", se.Message, "detail", se.Detail, "hint", se.Hint}
		default:
			if own := ownText(e, kids); own != "" {
				line += ": " + own
			}
		}
		fmt.Fprintln(w, redact(line, secrets))
		for i := 0; i+1 < len(server); i += 2 {
			if server[i+1] != "" {
				fmt.Fprintln(w, redact(fmt.Sprintf("%s  %s: %s", indent, server[i], server[i+1]), secrets))
			}
		}
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	walk(err, 0)
}

// describeServerError returns "SQLSTATE 28P01 invalid_password, severity
// FATAL".
func describeServerError(se postgres.ServerError) string {
	s := "SQLSTATE " + se.Code
	if se.Condition != "" {
		s += " " + se.Condition
	}
	if se.Severity != "" {
		s += ", severity " + se.Severity
	}
	return s
}

// ownText returns what e's text adds to the text of the error it wraps, or
// "" when it adds nothing (or wraps several).
func ownText(e error, kids []error) string {
	text := e.Error()
	switch len(kids) {
	case 0:
		return text
	case 1:
		inner := kids[0].Error()
		if text == inner {
			return ""
		}
		own := strings.TrimSuffix(text, inner)
		return strings.TrimRight(own, ": \n\t")
	}
	return ""
}

// secrets returns the strings --verbose must never print: every DSN this
// invocation may have used (its --dsn flag and $DURABLE_DSN) and the
// passwords in them.
func secrets(args []string) []string {
	var dsns []string
	for i, a := range args {
		switch {
		case a == "--dsn" || a == "-dsn":
			if i+1 < len(args) {
				dsns = append(dsns, args[i+1])
			}
		case strings.HasPrefix(a, "--dsn="), strings.HasPrefix(a, "-dsn="):
			_, v, _ := strings.Cut(a, "=")
			dsns = append(dsns, v)
		}
	}
	if v := os.Getenv("DURABLE_DSN"); v != "" {
		dsns = append(dsns, v)
	}
	var out []string
	for _, d := range dsns {
		out = append(out, dsnSecrets(d)...)
	}
	return out
}

// kvPasswordRE finds password and sslpassword in a key=value connection
// string.
var kvPasswordRE = regexp.MustCompile(`(?i)\b(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// dsnSecrets returns dsn and the passwords in it, as written and decoded.
func dsnSecrets(dsn string) []string {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return nil
	}
	out := []string{dsn}
	if u, err := url.Parse(dsn); err == nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw, url.PathEscape(pw), url.QueryEscape(pw))
		}
		q := u.Query()
		for _, k := range []string{"password", "sslpassword"} {
			for _, v := range q[k] {
				out = append(out, v, url.QueryEscape(v))
			}
		}
	}
	// The userinfo as written, even where url.Parse fails.
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				out = append(out, pw)
			}
		}
	}
	for _, m := range kvPasswordRE.FindAllStringSubmatch(dsn, -1) {
		out = append(out, m[1], strings.Trim(m[1], "'"))
	}
	return out
}

// userinfoRE finds the password of a URL's userinfo in any text.
var userinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):[^@\s]*@`)

// redact masks every secret in s, and any URL password.
func redact(s string, secrets []string) string {
	sorted := slices.Clone(secrets)
	slices.SortFunc(sorted, func(a, b string) int { return len(b) - len(a) }) // longest first
	for _, sec := range sorted {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return userinfoRE.ReplaceAllString(s, "$1:xxxxx@")
}

// --- --json ---

// jsonFlag adds --json to a command.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print exactly one JSON document on stdout (progress and logs stay on stderr)")
}

// writeJSON writes v as the one JSON document of the invocation.
func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// exitCode maps a command's error to the process exit code.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, new(usageError)):
		return exitUsage
	case contract.CodeOf(err) == contract.SchemaMismatch:
		return exitSchema
	}
	return exitFail
}

// errorOut is the JSON document of a failed command run with --json that
// printed nothing else on stdout. The message also goes to stderr.
type errorOut struct {
	Error    string `json:"error"`
	Code     string `json:"code"`      // the contract code of the failure ("not found", …), or "usage"
	ExitCode int    `json:"exit_code"` // the process exit code
}

// wantsJSON reports whether args ask for --json (before any "--").
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// countingWriter counts what is written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
