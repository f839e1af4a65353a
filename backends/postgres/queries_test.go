package postgres

import (
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/contract"
)

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"Now": "now", "ID": "id", "TTL": "ttl", "WorkflowID": "workflow_id", "RequestID": "request_id",
		"ExpectRevision": "expect_revision", "FenceResource": "fence_resource", "TerminalAge": "terminal_age",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

type testParams struct {
	Now   sql.Null[time.Time]
	Scope contract.Scope
	fenceParams
	TTL  time.Duration
	Code int64
}

func (p testParams) args() []any {
	return []any{null(p.Now), string(p.Scope), null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken), p.TTL.Seconds(), p.Code}
}

const testSQL = `SELECT @now::timestamptz, @scope::text, @fence_resource::text, @fence_owner::text, ` +
	`@fence_token::bigint, make_interval(secs => @ttl::float8), @code::int, @scope::text`

// TestBindParams: @name becomes $n in the order the fields are declared
// (embedded structs flattened), the casts stay.
func TestBindParams(t *testing.T) {
	got, err := bindParams(testSQL, paramFields(reflect.TypeFor[testParams]()))
	want := `SELECT $1::timestamptz, $2::text, $3::text, $4::text, $5::bigint, make_interval(secs => $6::float8), $7::int, $2::text`
	if err != nil || got != want {
		t.Errorf("bindParams = %q, %v; want %q", got, err, want)
	}
	if err := checkArgs(paramFields(reflect.TypeFor[testParams]()), testParams.args); err != nil {
		t.Errorf("checkArgs = %v", err)
	}
}

// TestQueryDefinitionErrors: every inconsistency between a statement's
// text, its parameter struct and its args is reported (newQuery panics with
// it at package initialization).
func TestQueryDefinitionErrors(t *testing.T) {
	fields := paramFields(reflect.TypeFor[testParams]())
	for _, c := range []struct {
		name, sql, want string
	}{
		{"UnknownName", testSQL + `, @nope::text`, "@nope is not a field"},
		{"UnusedField", strings.Replace(testSQL, `, @code::int`, ``, 1), "parameter code is not used"},
		{"NoCast", strings.Replace(testSQL, `@code::int`, `@code`, 1), "@code has no cast"},
		{"CastDoesNotFitTheType", strings.Replace(testSQL, `@ttl::float8`, `@ttl::int`, 1), "@ttl::int"},
		{"TwoCasts", testSQL + `, @code::bigint`, "@code is cast to int and to bigint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := bindParams(c.sql, fields); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("bindParams = %v, want an error with %q", err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name string
		args func(testParams) []any
		want string
	}{
		{"OutOfOrder", func(p testParams) []any {
			return []any{null(p.Now), string(p.Scope), null(p.FenceOwner), null(p.FenceResource), null(p.FenceToken), p.TTL.Seconds(), p.Code}
		}, "parameter 3 (fence_resource)"},
		{"Missing", func(p testParams) []any {
			return []any{null(p.Now), string(p.Scope), null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken), p.TTL.Seconds()}
		}, "6 values for 7 parameters"},
		{"NamedStringTypeNotConverted", func(p testParams) []any {
			return []any{null(p.Now), p.Scope, null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken), p.TTL.Seconds(), p.Code}
		}, "parameter 2 (scope)"},
		{"DurationNotInSeconds", func(p testParams) []any {
			return []any{null(p.Now), string(p.Scope), null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken), p.TTL, p.Code}
		}, "parameter 6 (ttl)"},
		{"NullNotUnwrapped", func(p testParams) []any {
			return []any{p.Now, string(p.Scope), null(p.FenceResource), null(p.FenceOwner), null(p.FenceToken), p.TTL.Seconds(), p.Code}
		}, "parameter 1 (now)"},
		{"NullAlwaysSent", func(p testParams) []any {
			return []any{null(p.Now), string(p.Scope), p.FenceResource.V, null(p.FenceOwner), null(p.FenceToken), p.TTL.Seconds(), p.Code}
		}, "parameter 3 (fence_resource)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := checkArgs(fields, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("checkArgs = %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestNewQueryRejectsADuplicateName: registering a name twice panics and
// leaves the registry as it was.
func TestNewQueryRejectsADuplicateName(t *testing.T) {
	n := len(registry)
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
		if len(registry) != n {
			t.Errorf("registry has %d statements, want %d", len(registry), n)
		}
	}()
	newQuery(read, qGetLease.name, `SELECT 1`, noParams.args, (*countRow).dest)
}

// TestStatementKinds: a statement that writes (or notifies) is registered
// as a write, so that a failure after sending it is OutcomeUnknown and
// database/sql never re-sends it.
func TestStatementKinds(t *testing.T) {
	for _, s := range registry {
		writes := false
		for _, w := range []string{"INSERT ", "UPDATE ", "DELETE ", "pg_notify("} {
			writes = writes || strings.Contains(s.tmpl, w)
		}
		if writes && s.kind != write {
			t.Errorf("%s changes data but is registered as a read", s.name)
		}
	}
}

// TestQueryLayerAddsNoAllocations: building a statement's arguments and
// scan targets allocates what the literal slices did before the query layer
// (the slices and the boxed values), nothing more.
func TestQueryLayerAddsNoAllocations(t *testing.T) {
	p := claimKeyParams{
		Now: sql.Null[time.Time]{V: mockNow, Valid: true}, Tol: time.Second, Scope: "s", Key: "k", Fingerprint: "fp",
		WorkflowID: "wf", Token: "tok", TTL: time.Minute,
	}
	var sink []any
	layer := testing.AllocsPerRun(100, func() {
		var r claimKeyRow
		sink = qClaimKey.args(p)
		sink = qClaimKey.dest(&r)
	})
	literal := testing.AllocsPerRun(100, func() {
		var r keyRow
		var src int64
		var fresh, live, reclaimable, match bool
		sink = []any{p.Now.V, p.Tol.Seconds(), string(p.Scope), p.Key, p.Fingerprint, p.WorkflowID, p.Token, p.TTL.Seconds()}
		sink = append([]any{&src, &fresh, &live, &reclaimable, &match}, r.dest()...)
	})
	_ = sink
	if layer > literal {
		t.Errorf("the query layer allocates %v times per call, the literal slices %v", layer, literal)
	}
}
