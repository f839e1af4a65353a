package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The raw floor of an operation: its captured statements, run by a loop
// that writes the protocol's messages itself on each connection's socket
// and parses the replies, with no driver: the least a Go program can do to
// run the operation's statements. Each connection prepares every statement
// once (Parse, as a named statement, through pgconn); then each operation
// is, per statement, one Bind, Execute and Sync written at once and the
// replies read up to ReadyForQuery. The arguments are the captured ones,
// encoded as pgx encodes them (the format pgx picks for the parameter's
// type, binary where pgx reads binary), but for the parameters the
// operation's pgbench script makes per client or per transaction, which
// take the same values as pgbench's variables: :client_id, :t (1000 +
// client), :r (a fresh random number per operation, the same in every
// statement of it) and a column of an earlier statement's row (\gset).
// Results are asked in the formats pgx asks for; every statement must
// return or change as many rows as the backend's own run of it did when it
// was captured, so a run that does no work (a renewal that finds no lease)
// fails instead of passing for a fast floor.

// rawStatement is one captured statement as the raw runner sends it.
type rawStatement struct {
	sql  string
	args []any    // as the backend sent them
	vars []string // per parameter: the pgbench expression (":r", …), or "" for args[i]
	gset string   // the \gset prefix of the statement's row, if any
	rows int64    // the rows the backend's run returned or changed
}

// rawParam is how a raw connection fills one parameter.
type rawParam struct {
	kind   byte // 'c' constant, 'i' client, 't' 1000+client, 'r' fresh, 'g' an earlier row's column
	oid    uint32
	format int16
	value  []byte // kind 'c': the encoded value, nil for NULL
	from   int    // kind 'g': the statement whose row
	col    int    // kind 'g': the column
}

// rawPrepared is a statement prepared on a raw connection.
type rawPrepared struct {
	name    string // of the prepared statement
	params  []rawParam
	fields  []pgconn.FieldDescription
	formats []int16 // result formats
	rows    int64
	row     []byte // the first DataRow's body of the last run, when a later statement reads it
	keepRow bool
}

// rawConn is one connection of the raw runner.
type rawConn struct {
	pc    *pgconn.PgConn
	conn  net.Conn
	stmts []rawPrepared
	out   []byte
	in    []byte
}

// dialRaw connects and prepares the statements of s.
func (c *ceiling) dialRaw(ctx context.Context, s []rawStatement) (*rawConn, error) {
	pc, err := pgconn.Connect(ctx, c.srv.DSN())
	if err != nil {
		return nil, err
	}
	rc := &rawConn{pc: pc, conn: pc.Conn(), out: make([]byte, 0, 1024), in: make([]byte, 0, 8192)}
	m := pgtype.NewMap()
	gsets := map[string]int{} // prefix → statement
	for i, st := range s {
		sd, err := pc.Prepare(ctx, "durable_raw_"+strconv.Itoa(i), st.sql, nil)
		if err != nil {
			pc.Close(ctx)
			return nil, err
		}
		p := rawPrepared{name: sd.Name, rows: st.rows, fields: sd.Fields}
		if len(sd.ParamOIDs) != len(st.args) {
			pc.Close(ctx)
			return nil, fmt.Errorf("statement %d has %d parameters, %d arguments were captured", i+1, len(sd.ParamOIDs), len(st.args))
		}
		for _, f := range sd.Fields {
			p.formats = append(p.formats, m.FormatCodeForOID(f.DataTypeOID))
		}
		for j, oid := range sd.ParamOIDs {
			rp, err := rawParamOf(m, oid, st.args[j], st.vars[j], gsets, rc.stmts)
			if err != nil {
				pc.Close(ctx)
				return nil, fmt.Errorf("statement %d, parameter %d: %w", i+1, j+1, err)
			}
			if rp.kind == 'g' {
				rc.stmts[rp.from].keepRow = true
			}
			p.params = append(p.params, rp)
		}
		if st.gset != "" {
			gsets[st.gset] = i
		}
		rc.stmts = append(rc.stmts, p)
	}
	return rc, nil
}

// rawParamOf decides how a parameter of type oid is filled: from the
// pgbench expression v, or with the captured arg encoded as pgx would.
// gsets maps a \gset prefix to the earlier statement (in prev) whose row
// sets it.
func rawParamOf(m *pgtype.Map, oid uint32, arg any, v string, gsets map[string]int, prev []rawPrepared) (rawParam, error) {
	format := m.FormatCodeForOID(oid)
	if _, ok := arg.(string); ok {
		format = pgtype.TextFormatCode // as pgx's ExtendedQueryBuilder chooses
	}
	p := rawParam{oid: oid, format: format}
	switch v {
	case "":
		p.kind = 'c'
		var err error
		p.value, err = m.Encode(oid, format, arg, make([]byte, 0, 32))
		return p, err
	case ":client_id":
		p.kind = 'i'
	case ":t":
		p.kind = 't'
	case ":r":
		p.kind = 'r'
	default:
		for prefix, from := range gsets {
			name, ok := strings.CutPrefix(v, ":"+prefix)
			if !ok {
				continue
			}
			for col, f := range prev[from].fields {
				if f.Name != name {
					continue
				}
				if f.DataTypeOID != oid {
					return p, fmt.Errorf("%s is of type %d, the parameter of type %d", v, f.DataTypeOID, oid)
				}
				// The column's bytes, in the format they were read.
				return rawParam{kind: 'g', oid: oid, format: prev[from].formats[col], from: from, col: col}, nil
			}
		}
		return p, fmt.Errorf("no column for %s", v)
	}
	switch {
	case format == pgtype.TextFormatCode:
	case oid == pgtype.TextOID || oid == pgtype.VarcharOID:
	case oid == pgtype.Int8OID || oid == pgtype.Int4OID:
	default:
		return p, fmt.Errorf("%s for type %d in format %d", v, oid, format)
	}
	return p, nil
}

// run does one operation as client, with r as the fresh number.
func (rc *rawConn) run(client int, r int64) error {
	for i := range rc.stmts {
		st := &rc.stmts[i]
		b := rc.out[:0]
		// Bind: the unnamed portal, the statement, parameter formats and
		// values, result formats.
		b = append(b, 'B', 0, 0, 0, 0, 0)
		b = append(b, st.name...)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(len(st.params)))
		for _, p := range st.params {
			b = binary.BigEndian.AppendUint16(b, uint16(p.format))
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(st.params)))
		for _, p := range st.params {
			var v []byte
			null := false
			switch p.kind {
			case 'c':
				v, null = p.value, p.value == nil
			case 'i':
				b = appendRawInt(b, p, int64(client))
				continue
			case 't':
				b = appendRawInt(b, p, 1000+int64(client))
				continue
			case 'r':
				b = appendRawInt(b, p, r)
				continue
			case 'g':
				v, null = rawColumn(rc.stmts[p.from].row, p.col)
			}
			if null {
				b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
				continue
			}
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(st.formats)))
		for _, f := range st.formats {
			b = binary.BigEndian.AppendUint16(b, uint16(f))
		}
		binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
		// Execute (the unnamed portal, every row) and Sync.
		b = append(b, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0, 'S', 0, 0, 0, 4)
		rc.out = b
		if _, err := rc.conn.Write(b); err != nil {
			return err
		}
		rows, err := rc.read(st)
		if err != nil {
			return fmt.Errorf("statement %d: %w", i+1, err)
		}
		if rows != st.rows {
			return fmt.Errorf("statement %d returned or changed %d rows, the backend's %d", i+1, rows, st.rows)
		}
	}
	return nil
}

// appendRawInt appends n as the value of parameter p: decimal digits in
// text (or for a text type in binary), big-endian in binary.
func appendRawInt(b []byte, p rawParam, n int64) []byte {
	switch {
	case p.format == pgtype.TextFormatCode || p.oid == pgtype.TextOID || p.oid == pgtype.VarcharOID:
		at := len(b)
		b = append(b, 0, 0, 0, 0)
		b = strconv.AppendInt(b, n, 10)
		binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
		return b
	case p.oid == pgtype.Int4OID:
		b = binary.BigEndian.AppendUint32(b, 4)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	default: // int8
		b = binary.BigEndian.AppendUint32(b, 8)
		return binary.BigEndian.AppendUint64(b, uint64(n))
	}
}

// rawColumn returns column col of a DataRow's body.
func rawColumn(row []byte, col int) (v []byte, null bool) {
	row = row[2:]
	for i := 0; ; i++ {
		n := int32(binary.BigEndian.Uint32(row))
		row = row[4:]
		if i == col {
			if n < 0 {
				return nil, true
			}
			return row[:n], false
		}
		if n > 0 {
			row = row[n:]
		}
	}
}

// read reads the replies to one statement up to ReadyForQuery and returns
// the count of its CommandComplete tag (the rows it returned or changed).
// An ErrorResponse is an error.
func (rc *rawConn) read(st *rawPrepared) (rows int64, err error) {
	buf := rc.in[:0]
	defer func() { rc.in = buf }()
	first := true
	for off := 0; ; {
		for len(buf)-off >= 5 {
			size := 1 + int(binary.BigEndian.Uint32(buf[off+1:]))
			if len(buf)-off < size {
				break
			}
			body := buf[off+5 : off+size]
			switch buf[off] {
			case 'D':
				if first && st.keepRow {
					st.row = append(st.row[:0], body...)
				}
				first = false
			case 'C':
				tag := bytes.TrimRight(body, "\x00")
				if sp := bytes.LastIndexByte(tag, ' '); sp >= 0 {
					rows, _ = strconv.ParseInt(string(tag[sp+1:]), 10, 64)
				}
			case 'Z':
				return rows, nil
			case 'E':
				return rows, fmt.Errorf("the server answered an error: %q", body)
			}
			off += size
		}
		if off > 0 && off == len(buf) {
			buf, off = buf[:0], 0
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		m, err := rc.conn.Read(buf[len(buf):cap(buf)])
		if err != nil {
			return rows, err
		}
		buf = buf[:len(buf)+m]
	}
}

// runRaw runs the statements s as an operation from clients raw
// connections (as clients first, first+1, …) for d, or transactions times
// each when transactions > 0, and returns operations per second.
func (c *ceiling) runRaw(tb testing.TB, ctx context.Context, s []rawStatement, clients, first int, d time.Duration, transactions int) float64 {
	tb.Helper()
	return runClients(tb, "raw floor", clients, d, func(client int, stop time.Time, n *atomic.Int64) error {
		rc, err := c.dialRaw(ctx, s)
		if err != nil {
			return err
		}
		defer rc.pc.Close(ctx)
		for i := 0; ; i++ {
			if transactions > 0 && i == transactions || transactions == 0 && i > 0 && !time.Now().Before(stop) {
				return nil
			}
			if err := rc.run(first+client, 1+rand.Int64N(1_000_000_000_000_000)); err != nil {
				return err
			}
			n.Add(1)
		}
	})
}
