// Command minimal is the baseline paytwice's benchmarks compare with: the
// smallest server doing the same durable work for an idempotent payment
// (POST /v1/payments, an Idempotency-Key header, a JSON body naming
// order_id and amount_satang), and nothing else: no pages, no events, no
// lab, no sweeper, no logging.
//
// For each new key it commits the claim first (the key's row, started),
// then the gateway's record in a ledger of its own (idempotent by key),
// then the answer and the charge in one transaction through the claim's
// token. A request whose key is held is answered from the stored row: 409
// while it runs, the saved answer (Idempotent-Replayed: true) once done,
// 422 for another body. On SQLite (a file path) every write goes through
// one writer per file whose transactions take every write waiting
// (group commit), with synchronous=FULL, and a key already stored is
// answered from a read connection without a write; on PostgreSQL (a
// postgres:// URL) every statement commits on its own, and PostgreSQL
// shares its WAL flushes among the commits that wait together.
//
//	go run ./bench/minimal -addr 127.0.0.1:18090 -db /tmp/minimal.db
//	go run ./bench/minimal -addr 127.0.0.1:18090 -db postgres://…
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"
)

// stored is a key's row as a held request reads it.
type stored struct {
	fingerprint string
	done        bool
	status      int
	body        []byte
}

// backend is the durable work, on SQLite or on PostgreSQL.
type backend interface {
	// lookup reads the key's row; ok is false when there is none.
	lookup(ctx context.Context, key string) (s stored, ok bool, err error)
	// claim inserts the key's row, started, unless it exists.
	claim(ctx context.Context, key, fingerprint, token string) (bool, error)
	// gateway records the charge in the gateway's ledger, once per key.
	gateway(ctx context.Context, key, id, order string, amount int64) error
	// save stores the charge and the answer through the claim's token.
	save(ctx context.Context, key, token, id, order string, amount int64, body []byte) error
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18090", "listen address")
	db := flag.String("db", "minimal.db", "a SQLite file, or a postgres:// URL")
	flag.Parse()
	ctx := context.Background()
	var b backend
	var err error
	if strings.HasPrefix(*db, "postgres://") || strings.HasPrefix(*db, "postgresql://") {
		b, err = openPostgres(ctx, *db)
	} else {
		b, err = openSQLite(*db)
	}
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) { pay(w, r, b) })
	http.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "minimal\n") })
	log.Fatal(http.ListenAndServe(*addr, nil))
}

func pay(w http.ResponseWriter, r *http.Request, b backend) {
	ctx := r.Context()
	key, err := strconv.Unquote(r.Header.Get("Idempotency-Key"))
	if err != nil {
		key = r.Header.Get("Idempotency-Key")
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	var in struct {
		OrderID      string `json:"order_id"`
		AmountSatang int64  `json:"amount_satang"`
	}
	if key == "" || len(key) > 255 || err != nil || json.Unmarshal(raw, &in) != nil || in.OrderID == "" || in.AmountSatang <= 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(raw)
	fp := hex.EncodeToString(sum[:])
	token := random()
	claimed, err := b.claim(ctx, key, fp, token)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !claimed {
		held(w, r, b, key, fp)
		return
	}
	id := "ch_" + random()
	if err := b.gateway(ctx, key, id, in.OrderID, in.AmountSatang); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	body, _ := json.Marshal(struct {
		ID           string `json:"charge_id"`
		Status       string `json:"status"`
		OrderID      string `json:"order_id"`
		AmountSatang int64  `json:"amount_satang"`
		CreatedAt    string `json:"created_at"`
	}{id, "paid", in.OrderID, in.AmountSatang, time.Now().UTC().Format(time.RFC3339Nano)})
	if err := b.save(ctx, key, token, id, in.OrderID, in.AmountSatang, body); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// held answers a request whose key another request claimed.
func held(w http.ResponseWriter, r *http.Request, b backend, key, fp string) {
	s, ok, err := b.lookup(r.Context(), key)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case !ok:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "retry", http.StatusConflict) // released meanwhile
	case s.fingerprint != fp:
		http.Error(w, "another body for this key", http.StatusUnprocessableEntity)
	case !s.done:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "in progress", http.StatusConflict)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(s.status)
		w.Write(s.body)
	}
}

func random() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// PostgreSQL: one statement per step, each its own transaction.

type pg struct{ pool *pgxpool.Pool }

func openPostgres(ctx context.Context, url string) (*pg, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 16 // as paytwice's pool: one connection per client
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS minimal_keys (key text PRIMARY KEY, fingerprint text NOT NULL,
			status text NOT NULL, claim text NOT NULL, response_status int, response_body bytea,
			created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX IF NOT EXISTS minimal_keys_created ON minimal_keys (created_at);
		CREATE TABLE IF NOT EXISTS minimal_charges (id text PRIMARY KEY, key text NOT NULL UNIQUE,
			order_id text NOT NULL, amount_satang bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE IF NOT EXISTS minimal_gateway (key text PRIMARY KEY, id text NOT NULL,
			order_id text NOT NULL, amount_satang bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now());`)
	return &pg{pool}, err
}

func (p *pg) lookup(ctx context.Context, key string) (stored, bool, error) {
	var s stored
	var status string
	var code *int32
	err := p.pool.QueryRow(ctx, `SELECT fingerprint, status, response_status, response_body FROM minimal_keys WHERE key = $1`, key).
		Scan(&s.fingerprint, &status, &code, &s.body)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if code != nil {
		s.status = int(*code)
	}
	s.done = status == "done"
	return s, err == nil, err
}

func (p *pg) claim(ctx context.Context, key, fp, token string) (bool, error) {
	tag, err := p.pool.Exec(ctx, `INSERT INTO minimal_keys (key, fingerprint, status, claim) VALUES ($1, $2, 'started', $3)
		ON CONFLICT (key) DO NOTHING`, key, fp, token)
	return err == nil && tag.RowsAffected() == 1, err
}

func (p *pg) gateway(ctx context.Context, key, id, order string, amount int64) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO minimal_gateway (key, id, order_id, amount_satang) VALUES ($1, $2, $3, $4)
		ON CONFLICT (key) DO NOTHING`, key, id, order, amount)
	return err
}

func (p *pg) save(ctx context.Context, key, token, id, order string, amount int64, body []byte) error {
	var marked bool
	err := p.pool.QueryRow(ctx, `WITH ins AS (
			INSERT INTO minimal_charges (id, key, order_id, amount_satang) VALUES ($3, $1, $4, $5)
			ON CONFLICT (key) DO NOTHING RETURNING 1
		), upd AS (
			UPDATE minimal_keys SET status = 'done', response_status = 201, response_body = $6
			WHERE key = $1 AND claim = $2 AND status = 'started' AND EXISTS (SELECT 1 FROM ins) RETURNING 1
		) SELECT EXISTS (SELECT 1 FROM upd)`, key, token, id, order, amount, body).Scan(&marked)
	if err == nil && !marked {
		err = fmt.Errorf("the claim on %q was lost", key)
	}
	return err
}

// SQLite: a writer per file whose transactions take every write waiting.

type lite struct {
	read     *sql.DB
	payments *writer
	ledger   *writer
}

func openSQLite(path string) (*lite, error) {
	dsn := func(p string) string {
		return "file:" + p + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	}
	payments, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, err
	}
	ledger, err := sql.Open("sqlite", dsn(path+".gateway"))
	if err != nil {
		return nil, err
	}
	read, err := sql.Open("sqlite", dsn(path)+"&_pragma=query_only(1)")
	if err != nil {
		return nil, err
	}
	payments.SetMaxOpenConns(1)
	ledger.SetMaxOpenConns(1)
	read.SetMaxOpenConns(4)
	if _, err := payments.Exec(`
		CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, status TEXT NOT NULL,
			claim TEXT NOT NULL, response_status INTEGER, response_body BLOB, created_at INTEGER NOT NULL DEFAULT (unixepoch()));
		CREATE INDEX IF NOT EXISTS keys_created ON keys (created_at);
		CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, order_id TEXT NOT NULL,
			amount_satang INTEGER NOT NULL, created_at INTEGER NOT NULL DEFAULT (unixepoch()));`); err != nil {
		return nil, err
	}
	if _, err := ledger.Exec(`CREATE TABLE IF NOT EXISTS gateway (key TEXT PRIMARY KEY, id TEXT NOT NULL,
		order_id TEXT NOT NULL, amount_satang INTEGER NOT NULL, created_at INTEGER NOT NULL DEFAULT (unixepoch()))`); err != nil {
		return nil, err
	}
	return &lite{read: read, payments: newWriter(payments), ledger: newWriter(ledger)}, nil
}

func (l *lite) lookup(ctx context.Context, key string) (stored, bool, error) {
	var s stored
	var status string
	var code sql.NullInt64
	err := l.read.QueryRowContext(ctx, `SELECT fingerprint, status, response_status, response_body FROM keys WHERE key = ?`, key).
		Scan(&s.fingerprint, &status, &code, &s.body)
	if errors.Is(err, sql.ErrNoRows) {
		return s, false, nil
	}
	s.status, s.done = int(code.Int64), status == "done"
	return s, err == nil, err
}

func (l *lite) claim(ctx context.Context, key, fp, token string) (bool, error) {
	// A key already stored is answered without a write.
	if _, ok, err := l.lookup(ctx, key); err != nil || ok {
		return false, err
	}
	var inserted bool
	err := l.payments.do(func(tx *sql.Tx) error {
		res, err := tx.Exec(`INSERT INTO keys (key, fingerprint, status, claim) VALUES (?, ?, 'started', ?)
			ON CONFLICT (key) DO NOTHING`, key, fp, token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		inserted = n == 1
		return err
	})
	return inserted, err
}

func (l *lite) gateway(ctx context.Context, key, id, order string, amount int64) error {
	return l.ledger.do(func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO gateway (key, id, order_id, amount_satang) VALUES (?, ?, ?, ?)
			ON CONFLICT (key) DO NOTHING`, key, id, order, amount)
		return err
	})
}

func (l *lite) save(ctx context.Context, key, token, id, order string, amount int64, body []byte) error {
	return l.payments.do(func(tx *sql.Tx) error {
		if _, err := tx.Exec(`SAVEPOINT one`); err != nil {
			return err
		}
		res, err := tx.Exec(`INSERT INTO charges (id, key, order_id, amount_satang) VALUES (?, ?, ?, ?)
			ON CONFLICT (key) DO NOTHING`, id, key, order, amount)
		if err == nil {
			res, err = tx.Exec(`UPDATE keys SET status = 'done', response_status = 201, response_body = ?
				WHERE key = ? AND claim = ? AND status = 'started'`, body, key, token)
		}
		if n, _ := res.RowsAffected(); err == nil && n != 1 {
			err = fmt.Errorf("the claim on %q was lost", key)
		}
		if err != nil {
			tx.Exec(`ROLLBACK TO one`)
			return err
		}
		_, err = tx.Exec(`RELEASE one`)
		return err
	})
}

// writer runs writes in transactions of every write waiting: one commit,
// one fsync, for all of them.
type writer struct{ jobs chan job }

type job struct {
	fn   func(*sql.Tx) error
	done chan error
}

func newWriter(db *sql.DB) *writer {
	w := &writer{jobs: make(chan job, 1024)}
	go func() {
		for first := range w.jobs {
			batch := []job{first}
		gather:
			for len(batch) < 256 {
				select {
				case j := <-w.jobs:
					batch = append(batch, j)
				default:
					break gather
				}
			}
			tx, err := db.Begin()
			errs := make([]error, len(batch))
			for i, j := range batch {
				if err != nil {
					errs[i] = err
					continue
				}
				errs[i] = j.fn(tx)
			}
			if err == nil {
				err = tx.Commit()
			}
			for i, j := range batch {
				if errs[i] == nil {
					errs[i] = err
				}
				j.done <- errs[i]
			}
		}
	}()
	return w
}

func (w *writer) do(fn func(*sql.Tx) error) error {
	j := job{fn: fn, done: make(chan error, 1)}
	w.jobs <- j
	return <-j.done
}
