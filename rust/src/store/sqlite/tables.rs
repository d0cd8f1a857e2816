//! Query results copied into owned [`Table`]s, so they can be turned into
//! Python objects after the SQL ran (the GIL released meanwhile). A long
//! result is handed over table by table while a helper thread reads ahead.

use std::ffi::{c_int, CStr};
use std::sync::Arc;

use rusqlite::{ffi, Connection, Rows, Statement};

use crate::model::{Table, ValueRef};
use crate::store::{helper_threads, read_ahead};

/// Rows read on the calling thread before a sleeping helper takes over the
/// rest: a result this short is read and handed over with no thread woken.
/// Waking one costs about what reading these rows does.
const FIRST_TABLE_ROWS: usize = 64;

/// Rows per table the helper hands over: small, so that its first table
/// reaches the consumer soon after the helper starts.
const TABLE_ROWS: usize = 16;

/// The same when a helper is awake (one finished a job moments ago): it
/// takes over at once, so the calling thread reads only a table's worth.
const FIRST_TABLE_ROWS_HELPER_AWAKE: usize = TABLE_ROWS;

/// All rows of `sql` in one table.
pub fn all(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<Table> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut table = Table::new(column_names(&stmt));
    let mut rows = RawRows::query(conn, sql, &mut stmt, params)?;
    rows.fill(&mut table, usize::MAX)?;
    Ok(table)
}

/// The rows of `sql` handed to `sink` in tables, in order, all on the
/// calling thread: first up to [`FIRST_TABLE_ROWS`] (or
/// [`FIRST_TABLE_ROWS_HELPER_AWAKE`]), read here; if more follow, a helper
/// thread reads them while `sink` takes the tables read so far. Reading
/// stops, without error, when `sink` returns false.
pub fn read_ahead(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    sink: &mut dyn FnMut(Table) -> bool,
) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut first = Table::new(column_names(&stmt));
    let mut rows = RawRows::query(conn, sql, &mut stmt, params)?;
    // Each fill reads a row past its table: false means that was all of it.
    let more = rows.fill(&mut first, FIRST_TABLE_ROWS_HELPER_AWAKE + 1)?
        && (helper_threads::one_awake()
            || rows.fill(&mut first, FIRST_TABLE_ROWS - FIRST_TABLE_ROWS_HELPER_AWAKE)?);
    if !more {
        sink(first);
        return Ok(());
    }
    let mut rows = Exclusive(rows);
    let next_rows = move |table: &mut Table| rows.get_mut().fill(table, TABLE_ROWS);
    read_ahead::read_rest_beside(first, next_rows, sink)
}

fn column_names(stmt: &Statement<'_>) -> Arc<[String]> {
    stmt.column_names().map(String::from).collect()
}

/// A running query whose cells are copied out through SQLite's C API.
///
/// rusqlite steps the rows; the copying bypasses its per-cell checks and
/// conversions, which cost about as much as SQLite's own work on a row.
/// rusqlite does not give out a statement's handle, so it is looked up among
/// the connection's statements once the first row is out: the one running
/// `sql`. A connection runs one query at a time here, so that one is ours.
struct RawRows<'stmt> {
    rows: Rows<'stmt>,
    db: *mut ffi::sqlite3,
    sql: &'stmt str,
    handle: *mut ffi::sqlite3_stmt,
}

impl<'stmt> RawRows<'stmt> {
    fn query(
        conn: &Connection,
        sql: &'stmt str,
        stmt: &'stmt mut Statement<'_>,
        params: impl rusqlite::Params,
    ) -> rusqlite::Result<Self> {
        Ok(RawRows {
            rows: stmt.query(params)?,
            // SAFETY: used only while `rows` borrows a statement of `conn`,
            // which keeps the connection open.
            db: unsafe { conn.handle() },
            sql,
            handle: std::ptr::null_mut(),
        })
    }

    /// Moves up to `limit` rows into `table`; false if the rows ran out first.
    fn fill(&mut self, table: &mut Table, limit: usize) -> rusqlite::Result<bool> {
        let width = table.columns.len() as c_int;
        for _ in 0..limit {
            if self.rows.next()?.is_none() {
                return Ok(false);
            }
            if self.handle.is_null() {
                self.handle = self.find_handle();
            }
            for column in 0..width {
                // SAFETY: the statement has just returned a row of `width`
                // columns; the cell is copied before the next step.
                table.push(unsafe { cell(self.handle, column) });
            }
        }
        Ok(true)
    }

    /// The statement of the connection that is running `sql`.
    fn find_handle(&self) -> *mut ffi::sqlite3_stmt {
        // SAFETY: the connection is open and used by this thread alone.
        // `sqlite3_sql` is a NUL-terminated string, or NULL for a statement
        // that kept no SQL (SQLite's own, FTS5's).
        unsafe {
            let mut stmt = ffi::sqlite3_next_stmt(self.db, std::ptr::null_mut());
            while !stmt.is_null() {
                let sql = ffi::sqlite3_sql(stmt);
                if !sql.is_null()
                    && ffi::sqlite3_stmt_busy(stmt) != 0
                    && self.is_our_sql(CStr::from_ptr(sql).to_bytes())
                {
                    return stmt;
                }
                stmt = ffi::sqlite3_next_stmt(self.db, stmt);
            }
        }
        // rusqlite prepared `sql` on this connection and stepped it to a row.
        unreachable!("the running statement is among its connection's statements")
    }

    /// Whether SQLite's copy of a statement's SQL is `self.sql`. The copy
    /// is of what rusqlite's statement cache prepared, `self.sql` trimmed,
    /// and ends at the statement's last token (a `;` after it not kept).
    fn is_our_sql(&self, kept: &[u8]) -> bool {
        self.sql
            .trim()
            .as_bytes()
            .strip_prefix(kept.trim_ascii())
            .is_some_and(|rest| rest.iter().all(|&b| b == b';' || b.is_ascii_whitespace()))
    }
}

/// Column `column` of the row that `stmt` has just returned.
///
/// Read through the column's value object: one call finds the column, then
/// the value calls are plain field reads (each `sqlite3_column_*` call finds
/// the column again, and enters and leaves the connection's mutex). SQLite
/// calls this value "unprotected": it may be read only by the thread running
/// the statement, which is the one reading it here.
///
/// # Safety
/// `stmt` has just returned `SQLITE_ROW` and has more than `column` columns.
/// The value borrows the statement's memory, valid until its next step.
unsafe fn cell<'a>(stmt: *mut ffi::sqlite3_stmt, column: c_int) -> ValueRef<'a> {
    let value = ffi::sqlite3_column_value(stmt, column);
    // The length is asked for after the pointer, as SQLite documents.
    let bytes = |data: *const std::ffi::c_void| {
        let len = ffi::sqlite3_value_bytes(value);
        if data.is_null() || len <= 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(data.cast::<u8>(), len as usize)
        }
    };
    match ffi::sqlite3_value_type(value) {
        ffi::SQLITE_INTEGER => ValueRef::Integer(ffi::sqlite3_value_int64(value)),
        ffi::SQLITE_FLOAT => ValueRef::Real(ffi::sqlite3_value_double(value)),
        ffi::SQLITE_TEXT => ValueRef::Text(bytes(ffi::sqlite3_value_text(value).cast())),
        ffi::SQLITE_BLOB => ValueRef::Blob(bytes(ffi::sqlite3_value_blob(value))),
        _ => ValueRef::Null,
    }
}

/// A value that one thread at a time uses, moved to a helper thread.
struct Exclusive<T>(T);

// SAFETY: connections are opened with SQLITE_OPEN_NO_MUTEX ("multi-thread"
// mode), in which SQLite lets a connection and its statements be used from
// any thread, one thread at a time. The rows move to the helper, and the
// calling thread touches neither them nor their statement or connection
// until the helper has finished with them.
unsafe impl<T> Send for Exclusive<T> {}

impl<T> Exclusive<T> {
    /// Used through a method (a closure naming the field would capture only
    /// the field, which is not Send).
    fn get_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn numbers(n: i64) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER, s TEXT)")
            .unwrap();
        for i in 0..n {
            conn.execute("INSERT INTO t VALUES (?1, ?2)", (i, format!("row {i}")))
                .unwrap();
        }
        conn
    }

    fn read(conn: &Connection, stop_after: usize) -> (Vec<i64>, usize) {
        let (mut seen, mut tables) = (Vec::new(), 0);
        read_ahead(conn, "SELECT n, s FROM t ORDER BY n", [], &mut |table| {
            tables += 1;
            for row in table.rows() {
                let (n, s) = (row.get(0), row.get(1));
                let ValueRef::Integer(n) = n else {
                    panic!("{n:?}")
                };
                assert_eq!(s, ValueRef::Text(format!("row {n}").as_bytes()));
                seen.push(n);
            }
            tables < stop_after
        })
        .unwrap();
        (seen, tables)
    }

    #[test]
    fn every_row_once_in_order_across_table_edges() {
        let first = FIRST_TABLE_ROWS as i64;
        let early = FIRST_TABLE_ROWS_HELPER_AWAKE as i64;
        let table = TABLE_ROWS as i64;
        for n in [
            0,
            1,
            early,
            early + 1,
            early + 2,
            first,
            first + 1,
            first + table,
            first + table + 1,
            1000,
        ] {
            let conn = numbers(n);
            // Twice in a row: the second read likely finds the helper of the
            // first awake and hands over early.
            for _ in 0..2 {
                let (seen, tables) = read(&conn, usize::MAX);
                assert_eq!(seen, (0..n).collect::<Vec<_>>(), "{n} rows");
                // A result that fits the first table comes in one table;
                // whether a longer one does depends on a helper being awake.
                if n <= early + 1 || n > first + 1 {
                    assert_eq!(tables == 1, n <= early + 1, "{n} rows in {tables} tables");
                }
            }
        }
    }

    #[test]
    fn sql_with_trailing_blanks_or_a_semicolon_is_found_as_sqlite_keeps_it() {
        let conn = numbers(10);
        for sql in [
            "SELECT n FROM t WHERE n < 3",
            "  SELECT n FROM t WHERE n < 3 ;\n",
        ] {
            assert_eq!(all(&conn, sql, []).unwrap().row_count(), 3, "{sql:?}");
        }
    }

    #[test]
    fn a_sink_that_stops_ends_the_read_without_error() {
        let conn = numbers(5000);
        let (seen, tables) = read(&conn, 2);
        assert_eq!(tables, 2);
        assert_eq!(seen, (0..seen.len() as i64).collect::<Vec<_>>());
        // The statement was reset: the connection reads again from the start.
        assert_eq!(read(&conn, usize::MAX).0.len(), 5000);
    }
}
