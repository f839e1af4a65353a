package postgres

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A rowsForm is the many-rows form of a coalesced statement: one statement
// that applies a run of calls of one kind at once, where the single form
// would be one statement per call. The calls' parameters travel as one
// array per parameter; the statement reads them as the rows of p, with
// p.ord the call's 1-based position, and returns p.ord first in every row
// it returns, then the single form's columns. A call without a row is a
// call whose single form would have returned none.
//
// A batch uses the form for a run of calls of the statement whose lockKeys
// are consecutive in the batch's order and all different (one UPDATE
// cannot change one row twice); other calls go one statement each, as
// before. The form is only ever used inside a batch of pgx (it sends arrays
// in binary); alone, or on lib/pq, a call runs its single form.
//
// Why: in a pipeline every statement costs the server its own bind,
// executor start and end, and the client its own encoding and result; at
// 16 clients on two cores that work, not the commit, is what limits
// coalesced writes (BENCHMARKS.md, "Coalesced writes").
type rowsForm struct {
	name  string
	tmpl  string                           // text but for {schema}
	cols  []func(calls [][]any, i int) any // parameter i of every call, as one array
	index int                              // position in rowsRegistry and statements.rows
}

// rowsRegistry is every rowsForm, as registry is every statement.
var rowsRegistry []*rowsForm

// rowsFrom is the placeholder of a rowsForm's text for p, its calls'
// parameters as rows.
const rowsFrom = "{rows}"

// withRows gives q the many-rows form sql: its text with {rows} where the
// calls' parameters are read (a FROM item), each parameter as p.name. It
// panics, at package initialization, when q is not coalesced, when sql
// has no {rows} or still names a parameter as @name, or when a
// parameter's type has no array form.
func (q *query[P, R]) withRows(sql string) *query[P, R] {
	name := q.name + "Rows"
	switch {
	case !q.statement.coalesce:
		panic("postgres: statement " + name + ": " + q.name + " is not coalesced")
	case strings.Count(sql, rowsFrom) != 1:
		panic("postgres: statement " + name + ": no " + rowsFrom)
	case strings.Contains(sql, "@"):
		panic("postgres: statement " + name + ": parameters are read from p, not @name")
	}
	fields := paramFields(reflect.TypeFor[P]())
	f := &rowsForm{name: name, index: len(rowsRegistry)}
	var unnest, names strings.Builder
	for i, fld := range fields {
		col := columnOf(fld.typ)
		if col == nil {
			panic("postgres: statement " + name + ": parameter " + fld.name + " has no array form")
		}
		f.cols = append(f.cols, col)
		if i > 0 {
			unnest.WriteString(", ")
			names.WriteString(", ")
		}
		unnest.WriteString("$" + strconv.Itoa(i+1) + "::" + q.casts[i] + "[]")
		names.WriteString(fld.name)
	}
	f.tmpl = strings.Replace(sql, rowsFrom, "unnest("+unnest.String()+") WITH ORDINALITY AS p("+names.String()+", ord)", 1)
	rowsRegistry = append(rowsRegistry, f)
	q.rows = f
	return q
}

// args returns the parameters of calls (each a single form's arguments)
// as the form's arguments: one array per parameter.
func (f *rowsForm) args(calls [][]any) []any {
	out := make([]any, len(f.cols))
	for i, col := range f.cols {
		out[i] = col(calls, i)
	}
	return out
}

// columnOf returns the builder of the array of a parameter of type t, from
// the values the single form's args give it (see wire): a NULL is a nil
// element.
func columnOf(t reflect.Type) func([][]any, int) any {
	if v := nullOf(t); v != nil {
		switch {
		case v == timeType:
			return nullColumn[time.Time]
		case v == durationType || v.Kind() == reflect.Float64:
			return nullColumn[float64]
		case v.Kind() == reflect.String:
			return nullColumn[string]
		case v.Kind() == reflect.Int64:
			return nullColumn[int64]
		}
		return nil
	}
	switch {
	case t == durationType:
		return column[float64]
	case t == timeType:
		return column[time.Time]
	case t == bytesType:
		return column[[]byte] // a nil []byte is NULL, as alone
	}
	switch t.Kind() {
	case reflect.String:
		return column[string]
	case reflect.Int64:
		return column[int64]
	case reflect.Int:
		return column[int]
	case reflect.Float64:
		return column[float64]
	}
	return nil
}

// column is the array of parameter i of calls, each of type T.
func column[T any](calls [][]any, i int) any {
	out := make([]T, len(calls))
	for k, c := range calls {
		v, ok := c[i].(T)
		if !ok {
			panic(fmt.Sprintf("postgres: parameter %d is %T, not %T", i+1, c[i], v))
		}
		out[k] = v
	}
	return out
}

// nullColumn is the array of parameter i of calls, each of type T or nil
// (NULL).
func nullColumn[T any](calls [][]any, i int) any {
	out := make([]*T, len(calls))
	for k, c := range calls {
		if c[i] == nil {
			continue
		}
		v, ok := c[i].(T)
		if !ok {
			panic(fmt.Sprintf("postgres: parameter %d is %T, not %T", i+1, c[i], v))
		}
		out[k] = &v
	}
	return out
}
