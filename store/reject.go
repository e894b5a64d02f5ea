package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// errInvalidEvent marks a batch refused before anything was written
// because one of its events does not validate.
var errInvalidEvent = errors.New("invalid event")

// ErrRefused marks an error of a Store that refused a batch for what its
// events say, so that the same batch is refused again however often it is
// retried (a server that takes agents' events answering 400 or 403).
// RowLevel reports it; a Writer then isolates the events refused.
var ErrRefused = errors.New("events refused")

// RowLevel reports whether err says the store refused a batch for what is
// in its rows, so that the same rows fail again however often they are
// retried: an event that does not validate; in Postgres a data exception
// (SQLSTATE class 22, such as 22021 invalid byte sequence or 22P05
// untranslatable character), an integrity violation (class 23) or a row
// past one of its limits (54000 program_limit_exceeded: an index row
// longer than a B-tree takes, about 2.7 KB); in SQLite a constraint, a
// value too big or a type mismatch. A batch refused row-level is split
// until the rows refused alone are found (Writer), so a limit of the
// batch rather than of a row costs only the splitting. Everything else
// (a connection lost, the server down or read-only, a timeout, a full
// disk, a busy database) is transient: the batch is kept and retried.
func RowLevel(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, errInvalidEvent) || errors.Is(err, ErrRefused) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		class := pe.Code[:min(2, len(pe.Code))]
		return class == "22" || class == "23" || pe.Code == pgProgramLimitExceeded
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary code, without the extended part
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
			return true
		}
	}
	return false
}

// pgProgramLimitExceeded is the SQLSTATE of an index row too long for its
// index, among other limits.
const pgProgramLimitExceeded = "54000"

// lineError is an error's message on one line, for logs, still wrapping
// the error so that RowLevel can read its code.
type lineError struct {
	msg string
	err error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.err }

// wrapLine returns "prefix: err" on one line, wrapping err.
func wrapLine(prefix string, err error) error {
	return &lineError{msg: prefix + ": " + oneLine(err), err: err}
}
