package main

import (
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// checkTelemetry checks, after the walkthrough, the spans of a first
// request, a replay and a 409, and the metric series that GET /metrics
// shows for them.
func checkTelemetry(t *testing.T, spans tracetest.SpanStubs, srv *httptest.Server) {
	t.Helper()
	// Spans by trace: each POST /payments is one trace whose root is
	// otelhttp's server span and whose durable.* spans are its children.
	type request struct {
		status  int64
		durable []string // durable.* span names, in end order
	}
	roots := map[trace.TraceID]trace.SpanID{}
	for _, s := range spans {
		if s.Name == "POST /payments" {
			roots[s.SpanContext.TraceID()] = s.SpanContext.SpanID()
		}
	}
	requests := map[trace.TraceID]*request{}
	for _, s := range spans {
		// durable's spans never carry a key, a tenant or a record id
		// (otelhttp's url.path is the application's business).
		for _, kv := range s.Attributes {
			v := kv.Value.Emit()
			if strings.HasPrefix(s.Name, "durable.") &&
				(strings.Contains(v, "order-100") || strings.Contains(v, "acme") || strings.Contains(v, "pay_")) {
				t.Errorf("span %s records a key, tenant or payment: %s=%s", s.Name, kv.Key, v)
			}
		}
		tid := s.SpanContext.TraceID()
		root, ok := roots[tid]
		if !ok {
			continue
		}
		r := requests[tid]
		if r == nil {
			r = &request{}
			requests[tid] = r
		}
		switch {
		case s.Name == "POST /payments":
			for _, kv := range s.Attributes {
				if kv.Key == "http.response.status_code" {
					r.status = kv.Value.AsInt64()
				}
			}
		case strings.HasPrefix(s.Name, "durable."):
			if s.Parent.SpanID() != root {
				t.Errorf("%s is not a child of the request's server span", s.Name)
			}
			r.durable = append(r.durable, s.Name)
		}
	}
	seen := map[string]int{}
	for _, r := range requests {
		seen[strconv.FormatInt(r.status, 10)+" "+strings.Join(r.durable, ",")]++
	}
	// A first request claims and completes; a replay only claims (the
	// stored outcome comes back with the claim); a 409 only claims.
	for want, n := range map[string]int{
		"201 durable.ClaimKey,durable.CompleteKey": 3,
		"201 durable.ClaimKey":                     3,
		"409 durable.ClaimKey":                     1,
		"422 durable.ClaimKey":                     1,
	} {
		if seen[want] != n {
			t.Errorf("%d requests traced as %q, want %d (all: %v)", seen[want], want, n, seen)
		}
	}

	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	text := string(body)
	for _, c := range []struct {
		series string
		labels []string
		want   float64 // -1: present, any value
	}{
		{"durable_idempotency_responses_total", []string{`durable_response_class="executed"`}, 3},
		{"durable_idempotency_responses_total", []string{`durable_response_class="replayed"`}, 3},
		{"durable_idempotency_responses_total", []string{`durable_response_class="409"`}, 1},
		{"durable_idempotency_responses_total", []string{`durable_response_class="422"`}, 1},
		{"durable_claims_total", []string{`db_system_name="memory"`, `durable_claim_result="new"`}, 3},
		{"durable_claims_total", []string{`durable_claim_result="in_flight"`}, 1},
		{"durable_claims_total", []string{`durable_claim_result="key_conflict"`}, 1},
		{"durable_operation_duration_seconds_count", []string{`db_operation_name="ClaimKey"`, `durable_outcome="ok"`}, 7},
		{"durable_operation_duration_seconds_count", []string{`db_operation_name="CompleteKey"`, `durable_outcome="ok"`}, 3},
		{"durable_operation_duration_seconds_count", []string{`db_operation_name="ClaimKey"`, `error_type="key_conflict"`}, 1},
		{"http_server_request_duration_seconds_count", []string{`http_route="/payments"`, `http_response_status_code="409"`}, 1},
		{"http_server_request_duration_seconds_count", []string{`http_route="/payments"`, `http_response_status_code="201"`}, 6},
	} {
		got, ok := series(text, c.series, c.labels)
		if !ok || (c.want >= 0 && got != c.want) {
			t.Errorf("%s%v = %v (found %v), want %v", c.series, c.labels, got, ok, c.want)
		}
	}
	if strings.Contains(text, "order-100") || strings.Contains(text, "acme") {
		t.Error("a metric label carries a key or a tenant")
	}
}

// series returns the value of the one series of name in Prometheus text
// whose labels include every one of labels.
func series(text, name string, labels []string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		end := strings.LastIndex(line, "} ")
		if end < 0 {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(line[:end], l) {
				match = false
				break
			}
		}
		if match {
			v, err := strconv.ParseFloat(strings.TrimSpace(line[end+2:]), 64)
			return v, err == nil
		}
	}
	return 0, false
}
