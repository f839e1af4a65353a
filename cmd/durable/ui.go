package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/durable-go/durable/console"
)

// uiTokenEnv names the environment variable that holds the console's
// token (a flag would show it in the process list).
const uiTokenEnv = "DURABLE_UI_TOKEN"

func runUI(ctx context.Context, args []string, e *env) error {
	fs, dsn := newFlags(e, "ui", "",
		"Serve the web console: workflows by status and age, keys in flight and their\n"+
			"claims, leases and their holders, for one scope at a time. Read-only unless\n"+
			"--allow-actions (delete a record, run cleanup after a dry run; each behind a\n"+
			"confirmation page). It opens the store without migrating it.\n\n"+
			"It listens on loopback only, unless --allow-remote is given together with a\n"+
			"token, read from $"+uiTokenEnv+" or --token-file, that every request must carry\n"+
			"(the console's sign-in form, or 'Authorization: Bearer'). It speaks plain HTTP:\n"+
			"beyond loopback, put it behind a TLS-terminating proxy. Stop it with Ctrl-C.")
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	actions := fs.Bool("allow-actions", false, "allow deleting records and running cleanup (default: read-only)")
	remote := fs.Bool("allow-remote", false, "allow a non-loopback --listen address (needs a token)")
	tokenFile := fs.String("token-file", "", "read the token from this file (default $"+uiTokenEnv+")")
	pageSize := fs.Int("page-size", console.DefaultPageSize, "default page size of the lists, 1-1000")
	scanLimit := fs.Int("scan-limit", console.DefaultScanLimit, "records of each kind the overview counts, 1-100000")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *pageSize < 1 || *pageSize > 1000 {
		return usagef("--page-size must be within 1 and 1000")
	}
	if *scanLimit < 1 || *scanLimit > console.MaxScanLimit {
		return usagef("--scan-limit must be within 1 and %d", console.MaxScanLimit)
	}
	token := os.Getenv(uiTokenEnv)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return usagef("--token-file: %v", errors.Unwrap(err))
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" && len(token) < 16 {
		return usagef("the token must be at least 16 characters")
	}
	loopback, err := isLoopback(*listen)
	if err != nil {
		return usagef("--listen: %v", err)
	}
	if !loopback && (!*remote || token == "") {
		return usagef("--listen %s is not a loopback address: it needs --allow-remote and a token ($%s or --token-file)", *listen, uiTokenEnv)
	}
	store, err := openForMaintenance(ctx, *dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	h, err := console.New(store, console.Options{AllowActions: *actions, Token: token, PageSize: *pageSize, ScanLimit: *scanLimit})
	if err != nil {
		return err
	}
	var handler http.Handler = h
	if token == "" {
		handler = loopbackHosts(h)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	mode := "read-only"
	if *actions {
		mode = "actions allowed"
	}
	fmt.Fprintf(e.stdout, "durable ui: serving on http://%s/ (%s); Ctrl-C stops it\n", ln.Addr(), mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-done
	return nil
}

// isLoopback reports whether the listen address addr binds to loopback
// only: "localhost", or a loopback IP. An empty host binds every
// interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// loopbackHosts refuses requests whose Host header is not a loopback name
// or address. A console without a token relies on loopback for its
// safety; this keeps a web page the operator visits from reaching it
// through a DNS name that resolves to 127.0.0.1 (DNS rebinding).
func loopbackHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "durable ui: this console answers only to a loopback host name (localhost, 127.0.0.1, [::1])", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
