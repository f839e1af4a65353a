package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// A query is one statement of the backend, written once (in sql.go) with
// named, typed parameters, in river's dbsqlc shape without a generator:
//
//	var qGetLease = newQuery(read, "GetLease", `SELECT … FROM {schema}.leases l
//	WHERE l.scope = @scope::text AND l.resource = @resource::text …`,
//		getLeaseParams.args, (*leaseRow).dest)
//
// P is the parameter struct. Each exported field is one parameter; its SQL
// name is the field name in snake_case (Scope → @scope, WorkflowID →
// @workflow_id), and @name is rewritten once, when the package is
// initialized, to $n in the order the fields are declared (embedded structs
// are flattened). Every use of a parameter carries a cast that fits the
// field's Go type (see castsOf), so pgx and database/sql drivers (lib/pq)
// send and read it the same way. P's args method lists the values in the
// same order, converted to the types every client library sends alike:
// time.Duration as float8 seconds, a sql.Null as NULL or its value, named
// string types as string. newQuery checks, with reflection and once, that
// every @name is a field and every field is used, that the casts fit, and
// that args returns the fields in declaration order (never per call).
//
// R is the row the statement returns; its dest method returns the scan
// targets in the order of the SELECT list.
//
// The kind (read or write: may the statement change anything) belongs to
// the definition: the runners (one, each) pass it both to Backend.do and to
// the querier. {schema} is replaced per Backend by the quoted schema (see
// newStatements): statements are always schema-qualified and never depend
// on search_path.
//
// Every query registers itself, so the list of statements (registry) is
// derived from their definitions; the tests iterate it.
type query[P, R any] struct {
	*statement
	args func(P) []any
	dest func(*R) []any
	// lock, set by coalesced, returns the row a call locks, or false when
	// the call must run alone.
	lock func(P) (lockKey, bool)
	// rows, set by withRows, is the many-rows form of a coalesced
	// statement.
	rows *rowsForm
}

// statement is what every query has, whatever its types.
type statement struct {
	name   string
	kind   opKind
	tmpl   string   // final text but for {schema}
	params []string // parameter names: params[0] is $1
	casts  []string // their casts: casts[0] is $1's
	index  int      // position in registry and in statements.text
	// coalesce: a write that a backend with a batcher may send in a
	// batch with others (see query.coalesced and flushBatch).
	coalesce bool
}

// registry is every statement, in the order the package initializes them.
// It is built while the package is initialized and never changes
// afterwards. The tests that must see every statement iterate it:
// TestSQLMockPinsEveryStatement, TestFastPathIsOneStatement,
// TestFastPathIsOneRoundTripOnEveryClient, TestStatementsAreSchemaQualified.
var registry []*statement

// noParams is the parameter struct of a statement without parameters.
type noParams struct{}

func (noParams) args() []any { return nil }

// newQuery defines and registers a statement. It panics when the
// definition is inconsistent (see query), so a mistake fails every test
// run, at package initialization.
func newQuery[P, R any](kind opKind, name, sql string, args func(P) []any, dest func(*R) []any) *query[P, R] {
	for _, s := range registry {
		if s.name == name {
			panic("postgres: statement " + name + " defined twice")
		}
	}
	fields := paramFields(reflect.TypeFor[P]())
	text, casts, err := bindParamsCasts(sql, fields)
	if err == nil {
		err = checkArgs(fields, args)
	}
	if err != nil {
		panic("postgres: statement " + name + ": " + err.Error())
	}
	s := &statement{name: name, kind: kind, tmpl: text, index: len(registry), casts: casts}
	for _, f := range fields {
		s.params = append(s.params, f.name)
	}
	registry = append(registry, s)
	return &query[P, R]{statement: s, args: args, dest: dest}
}

// sql returns the statement's text for the schema of st.
func (s *statement) sql(st *statements) string { return st.text[s.index] }

// one runs q on b with the backend's retries and error mapping, and scans
// its first row, if any, into r. found is false when there was no row. A
// coalesced statement goes through b's batcher when b has one (see
// runCoalesced): alone, that is this same single statement.
func (q *query[P, R]) one(ctx context.Context, b *Backend, p P, r *R) (found bool, err error) {
	if q.lock != nil && b.batcher != nil {
		if lk, ok := q.lock(p); ok {
			return q.runCoalesced(ctx, b, q.sql(b.st), q.args(p), lk, r)
		}
	}
	text, args, dest := q.sql(b.st), q.args(p), q.dest(r)
	err = b.do(ctx, q.kind, func() (err error) {
		found, err = b.q.QueryRow(ctx, q.kind, text, args, dest...)
		return err
	})
	return found, err
}

// each runs the statement s on b as query.one does, with its arguments
// and scan targets already built (an operation may choose between
// statements of one row type: see listWorkflowsStatement), scanning every
// row into dest and calling row after each. reset is called before every
// attempt: an attempt that fails and is retried starts over.
func (s *statement) each(ctx context.Context, b *Backend, args, dest []any, reset func(), row func() error) error {
	text := s.sql(b.st)
	return b.do(ctx, s.kind, func() error {
		reset()
		return b.q.Query(ctx, s.kind, text, args, dest, row)
	})
}

// run runs q once on db, with neither retries nor error mapping (for the
// schema version read, which maps its errors itself: a missing table is
// version 0).
func (q *query[P, R]) run(ctx context.Context, db querier, st *statements, p P, r *R) (found bool, err error) {
	return db.QueryRow(ctx, q.kind, q.sql(st), q.args(p), q.dest(r)...)
}

// statements is the text of every registered statement for one schema,
// indexed by statement.index.
type statements struct {
	text []string // registry's, by index
	rows []string // rowsRegistry's, by index
}

// newStatements builds the text of every statement for schema, which must
// be valid.
func newStatements(schema string) *statements {
	st := &statements{text: make([]string, len(registry)), rows: make([]string, len(rowsRegistry))}
	q := quoteIdent(schema)
	for i, s := range registry {
		st.text[i] = strings.ReplaceAll(s.tmpl, "{schema}", q)
	}
	for i, f := range rowsRegistry {
		st.rows[i] = strings.ReplaceAll(f.tmpl, "{schema}", q)
	}
	return st
}

// quoteIdent quotes a validated schema name.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// nowParam is the @now of a statement: the injected clock, or NULL for the
// database's now().
func (b *Backend) nowParam() sql.Null[time.Time] {
	if b.clock == nil {
		return sql.Null[time.Time]{}
	}
	return sql.Null[time.Time]{V: b.clock.Now(), Valid: true}
}

// null returns n as a statement argument: NULL or its value.
func null[T any](n sql.Null[T]) any {
	if !n.Valid {
		return nil
	}
	return n.V
}

// --- the checks of newQuery, run once per statement ---

// paramField is one parameter: a leaf field of the parameter struct.
type paramField struct {
	name  string // SQL name
	index []int  // for reflect.Value.FieldByIndex
	typ   reflect.Type
}

// paramFields returns the parameters of P in declaration order, embedded
// structs flattened.
func paramFields(t reflect.Type) []paramField {
	if t.Kind() != reflect.Struct {
		panic("postgres: parameters must be a struct, not " + t.String())
	}
	var out []paramField
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			continue // its fields follow
		}
		if !f.IsExported() {
			panic("postgres: parameter field " + t.String() + "." + f.Name + " is not exported")
		}
		out = append(out, paramField{name: snakeCase(f.Name), index: f.Index, typ: f.Type})
	}
	return out
}

// snakeCase turns a Go field name into a SQL name: WorkflowID →
// workflow_id, TTL → ttl.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) &&
			(unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
	bytesType    = reflect.TypeFor[[]byte]()
)

// nullOf returns T for sql.Null[T], or nil.
func nullOf(t reflect.Type) reflect.Type {
	if t.PkgPath() == "database/sql" && strings.HasPrefix(t.Name(), "Null[") {
		if f, ok := t.FieldByName("V"); ok {
			return f.Type
		}
	}
	return nil
}

// castsOf returns the casts a parameter of type t may carry.
func castsOf(t reflect.Type) []string {
	if v := nullOf(t); v != nil {
		return castsOf(v)
	}
	switch {
	case t == durationType:
		return []string{"float8"} // seconds: make_interval(secs => @ttl::float8)
	case t == timeType:
		return []string{"timestamptz"}
	case t == bytesType:
		return []string{"bytea"}
	}
	switch t.Kind() {
	case reflect.String:
		return []string{"text"}
	case reflect.Int64:
		return []string{"bigint", "int"}
	case reflect.Int:
		return []string{"int"}
	case reflect.Float64:
		return []string{"float8"}
	}
	return nil
}

// bindParams rewrites every @name of sql to $n, n being name's position in
// fields, and checks that each use carries one fitting cast, the same at
// every use, and that every field is used.
func bindParams(sql string, fields []paramField) (string, error) {
	text, _, err := bindParamsCasts(sql, fields)
	return text, err
}

// bindParamsCasts is bindParams, also returning each field's cast.
func bindParamsCasts(sql string, fields []paramField) (string, []string, error) {
	pos := make(map[string]int, len(fields))
	for i, f := range fields {
		if castsOf(f.typ) == nil {
			return "", nil, fmt.Errorf("parameter %s: unsupported type %s", f.name, f.typ)
		}
		pos[f.name] = i
	}
	cast := make([]string, len(fields))
	var b strings.Builder
	for {
		at := strings.IndexByte(sql, '@')
		if at < 0 {
			b.WriteString(sql)
			break
		}
		b.WriteString(sql[:at])
		sql = sql[at+1:]
		n := identLen(sql)
		name := sql[:n]
		i, ok := pos[name]
		if !ok {
			return "", nil, fmt.Errorf("@%s is not a field of the parameter struct", name)
		}
		sql = sql[n:]
		c, ok := strings.CutPrefix(sql, "::")
		if !ok {
			return "", nil, fmt.Errorf("@%s has no cast", name)
		}
		c = c[:identLen(c)]
		switch {
		case cast[i] == "" && !slices.Contains(castsOf(fields[i].typ), c):
			return "", nil, fmt.Errorf("@%s::%s: a %s parameter is cast to one of %v", name, c, fields[i].typ, castsOf(fields[i].typ))
		case cast[i] != "" && cast[i] != c:
			return "", nil, fmt.Errorf("@%s is cast to %s and to %s", name, cast[i], c)
		}
		cast[i] = c
		b.WriteString("$" + strconv.Itoa(i+1))
	}
	for i, f := range fields {
		if cast[i] == "" {
			return "", nil, fmt.Errorf("parameter %s is not used", f.name)
		}
	}
	return b.String(), cast, nil
}

func identLen(s string) int {
	n := 0
	for n < len(s) && (s[n] == '_' || 'a' <= s[n] && s[n] <= 'z' || '0' <= s[n] && s[n] <= '9') {
		n++
	}
	return n
}

// checkArgs calls args on parameters whose fields all differ, once with
// every sql.Null valid and once with every one NULL, and checks that it
// returns each field, converted as wire says, in declaration order.
func checkArgs[P any](fields []paramField, args func(P) []any) error {
	for _, valid := range []bool{true, false} {
		var p P
		v := reflect.ValueOf(&p).Elem()
		want := make([]any, len(fields))
		for i, f := range fields {
			fv := v.FieldByIndex(f.index)
			if t := nullOf(f.typ); t != nil {
				fv.FieldByName("Valid").SetBool(valid)
				fv = fv.FieldByName("V")
			}
			setDistinct(fv, i)
			want[i] = wire(v.FieldByIndex(f.index))
		}
		got := args(p)
		if len(got) != len(fields) {
			return fmt.Errorf("args returns %d values for %d parameters", len(got), len(fields))
		}
		for i, f := range fields {
			if !reflect.DeepEqual(got[i], want[i]) {
				return fmt.Errorf("args returns %#v for parameter %d (%s), want %#v: list the fields in declaration order, converted as wire does", got[i], i+1, f.name, want[i])
			}
		}
	}
	return nil
}

// setDistinct sets v to a value that depends on i.
func setDistinct(v reflect.Value, i int) {
	switch t := v.Type(); {
	case t == durationType:
		v.SetInt(int64(i+1) * int64(time.Second))
	case t == timeType:
		v.Set(reflect.ValueOf(time.Unix(int64(i+1), 0).UTC()))
	case t == bytesType:
		v.SetBytes([]byte{byte(i + 1)})
	case t.Kind() == reflect.String:
		v.SetString("p" + strconv.Itoa(i+1))
	case t.Kind() == reflect.Int64, t.Kind() == reflect.Int:
		v.SetInt(int64(1000 + i))
	case t.Kind() == reflect.Float64:
		v.SetFloat(float64(i) + 0.5)
	}
}

// wire is the statement argument that a parameter's value must become.
func wire(v reflect.Value) any {
	t := v.Type()
	if nullOf(t) != nil {
		if !v.FieldByName("Valid").Bool() {
			return nil
		}
		return wire(v.FieldByName("V"))
	}
	switch {
	case t == durationType:
		return time.Duration(v.Int()).Seconds()
	case t == timeType, t == bytesType:
		return v.Interface()
	}
	switch t.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int64:
		return v.Int()
	case reflect.Int:
		return int(v.Int())
	case reflect.Float64:
		return v.Float()
	}
	return v.Interface()
}
