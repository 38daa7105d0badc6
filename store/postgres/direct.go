package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A new payment's hot statements (the claim, the gateway's record and the
// save) run here one level below pgx's Query: each is prepared once per
// connection under a name of its own, its arguments are written in
// PostgreSQL's binary form straight into one buffer, and its row is read
// from the bytes that came. pgx's Query would box every argument, look up
// an encoder for each, choose a format for each result column and plan a
// scan for each on every call: for the claim's thirteen arguments and
// eighteen columns that cost more than the rest of its Go code.

// statement is a prepared statement: its name on every connection, and
// its text.
type statement struct{ name, sql string }

// binaryFormat asks for every argument and result in binary form.
var binaryFormat = []int16{1}

// args are a statement's arguments, in PostgreSQL's binary form, checked
// against the types PostgreSQL gave the statement's parameters.
type args struct {
	oids []uint32
	buf  []byte
	vals [][]byte
	err  error
}

// argsPool keeps args between statements: a statement's arguments are
// copied into the connection's buffer as it is sent, and every payment
// writes three statements' worth.
var argsPool = sync.Pool{New: func() any { return &args{buf: make([]byte, 0, 512), vals: make([][]byte, 0, 16)} }}

// maxPooledArgs bounds the buffer an args goes back to the pool with, so
// that one large body does not stay in memory for good.
const maxPooledArgs = 4096

func newArgs(oids []uint32) *args {
	a := argsPool.Get().(*args)
	a.oids, a.buf, a.vals, a.err = oids, a.buf[:0], a.vals[:0], nil
	return a
}

// free returns a to the pool; it must not be used after.
func (a *args) free() {
	if cap(a.buf) > maxPooledArgs {
		return
	}
	clear(a.vals[:cap(a.vals)])
	a.oids, a.err = nil, nil
	argsPool.Put(a)
}

// oid is the type of the next parameter, 0 past the last.
func (a *args) oid() uint32 {
	if len(a.vals) < len(a.oids) {
		return a.oids[len(a.vals)]
	}
	return 0
}

// put ends the value that starts at start in the buffer.
func (a *args) put(start int) {
	a.vals = append(a.vals, a.buf[start:len(a.buf):len(a.buf)])
}

func (a *args) mismatch(what string) {
	if a.err == nil {
		a.err = fmt.Errorf("postgres: parameter $%d is of type %d, not %s", len(a.vals)+1, a.oid(), what)
	}
	a.vals = append(a.vals, nil)
}

func (a *args) text(s string) *args {
	switch a.oid() {
	case pgtype.TextOID, pgtype.VarcharOID:
		start := len(a.buf)
		a.buf = append(a.buf, s...)
		a.put(start)
	default:
		a.mismatch("text")
	}
	return a
}

func (a *args) bytes(b []byte) *args {
	switch {
	case b == nil:
		a.vals = append(a.vals, nil) // NULL
	case a.oid() == pgtype.ByteaOID:
		start := len(a.buf)
		a.buf = append(a.buf, b...)
		a.put(start)
	default:
		a.mismatch("bytea")
	}
	return a
}

func (a *args) int(n int64) *args {
	start := len(a.buf)
	switch a.oid() {
	case pgtype.Int8OID:
		a.buf = binary.BigEndian.AppendUint64(a.buf, uint64(n))
	case pgtype.Int4OID:
		if n != int64(int32(n)) {
			a.mismatch("an integer that fits in 32 bits")
			return a
		}
		a.buf = binary.BigEndian.AppendUint32(a.buf, uint32(n))
	default:
		a.mismatch("integer")
		return a
	}
	a.put(start)
	return a
}

// microsToY2K is the Unix time of 2000-01-01, PostgreSQL's epoch, in
// microseconds.
const microsToY2K = 946684800 * 1000000

// time writes a timestamptz as PostgreSQL keeps it (and as pgx writes
// one): microseconds since 2000-01-01 UTC, the nanoseconds cut off.
func (a *args) time(t time.Time) *args {
	if a.oid() != pgtype.TimestamptzOID {
		a.mismatch("timestamptz")
		return a
	}
	start := len(a.buf)
	us := t.Unix()*1000000 + int64(t.Nanosecond())/1000
	a.buf = binary.BigEndian.AppendUint64(a.buf, uint64(us-microsToY2K))
	a.put(start)
	return a
}

// directRow reads a row of a statement run by direct: its raw values,
// each in binary form (nil for NULL), and what to scan them with when
// they are more than a glance can read.
type directRow struct {
	vals   [][]byte
	fields []pgconn.FieldDescription
	types  *pgtype.Map
}

// scan decodes the row's columns into dest, as pgx's Scan would.
func (r directRow) scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("postgres: %d columns scanned into %d destinations", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := r.types.Scan(r.fields[i].DataTypeOID, r.fields[i].Format, r.vals[i], d); err != nil {
			return fmt.Errorf("postgres: column %s: %w", r.fields[i].Name, err)
		}
	}
	return nil
}

// direct runs st with the arguments fill writes, on a connection of the
// pool, and hands each row it returns to row (which may be nil); it
// returns the command's tag. The statement's error wins over row's: it
// may come after the row, from the commit.
func (db *DB) direct(ctx context.Context, st statement, fill func(*args), row func(directRow) error) (pgconn.CommandTag, error) {
	c, err := db.pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	sd, err := c.Conn().Prepare(ctx, st.name, st.sql)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	a := newArgs(sd.ParamOIDs)
	defer a.free()
	fill(a)
	if a.err == nil && len(a.vals) != len(sd.ParamOIDs) {
		a.err = fmt.Errorf("postgres: %d arguments for %d parameters", len(a.vals), len(sd.ParamOIDs))
	}
	if a.err != nil {
		return pgconn.CommandTag{}, a.err
	}
	rr := c.Conn().PgConn().ExecStatement(ctx, sd, a.vals, binaryFormat, binaryFormat)
	var rowErr error
	for rr.NextRow() {
		if row != nil && rowErr == nil {
			rowErr = row(directRow{vals: rr.Values(), fields: rr.FieldDescriptions(), types: c.Conn().TypeMap()})
		}
	}
	tag, err := rr.Close()
	if err != nil {
		forgetStaleStatement(c, st, err)
		return tag, err
	}
	return tag, rowErr
}

// forgetStaleStatement deallocates st on a connection where PostgreSQL
// refused to run it as prepared (its tables changed since, or the
// statement is gone), so that the next call prepares it afresh, as pgx
// does with the statements it caches.
func forgetStaleStatement(c *pgxpool.Conn, st statement, err error) {
	if code := sqlState(err); (code != "0A000" && code != "26000") || c.Conn().IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.Conn().Deallocate(ctx, st.name) != nil {
		c.Conn().Close(ctx) // the pool drops a closed connection
	}
}
