// Command durable is the operator's tool for durable stores.
//
// Usage:
//
//	durable <command> [flags]
//
// Commands:
//
//	migrate   apply, roll back, show or force the Postgres schema version
//	cleanup   delete expired and old records in batches
//	inspect   print one workflow, idempotency key or lease
//	doctor    check connectivity, schema, clock skew and LISTEN support
//	bench     run a mixed workload and report throughput and latency
//
// Every command takes --dsn, or reads DURABLE_DSN when the flag is absent.
// Run "durable <command> --help" for the flags of one command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/durable-go/durable"
	_ "github.com/durable-go/durable/backends/memory"
	_ "github.com/durable-go/durable/backends/postgres"
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
}

func commands() []command {
	return []command{
		{"migrate", "apply, roll back, show or force the Postgres schema version", runMigrate},
		{"cleanup", "delete expired and old records in batches", runCleanup},
		{"inspect", "print one workflow, idempotency key or lease", runInspect},
		{"doctor", "check connectivity, schema, clock skew and LISTEN support", runDoctor},
		{"bench", "run a mixed workload and report throughput and latency", runBench},
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
}

// run executes one invocation and returns the process exit code: 0 on
// success, 1 when the command failed, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
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
		err := c.run(ctx, args[1:], e)
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
			return 1
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
	}
	return ""
}

// newFlags returns a flag set with the --dsn flag every command shares.
func newFlags(e *env, name, args, about string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	dsn := fs.String("dsn", "", "store DSN, e.g. postgres://user@host/db (default $DURABLE_DSN)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: durable %s [flags] %s\n\n%s\n\nflags:\n", name, args, about)
		fs.PrintDefaults()
	}
	return fs, dsn
}

// parse parses args; --help returns flag.ErrHelp after printing usage to
// stdout.
func parse(fs *flag.FlagSet, e *env, args []string) error {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(e.stdout)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	if err := fs.Parse(args); err != nil {
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

func openStore(ctx context.Context, dsnFlag string) (*durable.Store, error) {
	dsn, err := resolveDSN(dsnFlag)
	if err != nil {
		return nil, err
	}
	return durable.Open(ctx, dsn)
}
