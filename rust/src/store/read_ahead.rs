//! A long read handed to its consumer table by table, on the calling
//! thread, while a helper thread reads the rest: reading rows (the
//! backend's work) and turning them into Python objects (the caller's,
//! under the GIL) then run on two cores. Each backend reads its first
//! table on the calling thread (a short result needs no helper) and sends
//! the rest from the helper.

use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use crate::model::Table;
use crate::store::helper_threads;

/// Tables the helper reads ahead of the consumer at most (bounds memory).
const TABLES_AHEAD: usize = 16;

/// How long the consumer looks for the helper's next table awake before it
/// sleeps: a few tables' read.
const POLL_FOR_TABLE: Duration = Duration::from_micros(100);

/// Hands `first` to `sink`, then, in order, each table that `fill` fills
/// on a helper thread, until the rows run out (`fill` returns false) or
/// `sink` returns false. `fill` moves the backend's next rows into the
/// (empty) table it is given. Returns `fill`'s error, if it had one.
pub fn read_rest_beside<E: Send + 'static>(
    first: Table,
    mut fill: impl FnMut(&mut Table) -> Result<bool, E> + Send,
    sink: &mut dyn FnMut(Table) -> bool,
) -> Result<(), E> {
    let (tables, received) = mpsc::sync_channel(TABLES_AHEAD);
    let mut table = first.sized_like();
    let read_rest = move || loop {
        let more = fill(&mut table)?;
        let next = table.sized_like();
        let sent = table.row_count() == 0 || tables.send(table).is_ok();
        if !sent || !more {
            return Ok(());
        }
        table = next;
    };
    let hand_over = move || {
        let mut wanted = sink(first);
        while wanted {
            let Some(table) = next_table(&received) else {
                break;
            };
            table.prefetch();
            wanted = sink(table);
        }
        // `received` goes here: a helper still reading stops at its next table.
    };
    helper_threads::beside(read_rest, hand_over).0
}

/// The helper's next table; None once it is done (or failed).
fn next_table(received: &Receiver<Table>) -> Option<Table> {
    helper_threads::recv_awake_for(received, POLL_FOR_TABLE, || ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ValueRef;
    use std::sync::Arc;

    fn numbered(from: i64, count: i64) -> Table {
        let mut table = Table::new(Arc::from(vec!["n".to_string()]));
        for n in from..from + count {
            table.push(ValueRef::Integer(n));
        }
        table
    }

    fn numbers(table: &Table) -> Vec<i64> {
        table
            .rows()
            .map(|r| match r.get(0) {
                ValueRef::Integer(n) => n,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A fill of `size` numbers a table from `next` up to `end`, failing
    /// with `error` there if given.
    fn counting(
        mut next: i64,
        end: i64,
        size: i64,
        error: Option<&'static str>,
    ) -> impl FnMut(&mut Table) -> Result<bool, &'static str> + Send {
        move |table| {
            for _ in 0..size {
                if next == end {
                    return error.map_or(Ok(false), Err);
                }
                table.push(ValueRef::Integer(next));
                next += 1;
            }
            Ok(true)
        }
    }

    #[test]
    fn every_row_reaches_the_sink_once_in_order_and_an_error_comes_back() {
        for (end, size) in [(3, 10), (13, 10), (103, 10), (1000, 7)] {
            let mut seen = Vec::new();
            let mut sink = |table: Table| {
                seen.extend(numbers(&table));
                true
            };
            let out = read_rest_beside(numbered(0, 3), counting(3, end, size, None), &mut sink);
            assert_eq!(out, Ok(()));
            assert_eq!(seen, (0..end).collect::<Vec<_>>(), "{end} rows");
        }
        let failing = counting(3, 50, 10, Some("the rest failed"));
        let out = read_rest_beside(numbered(0, 3), failing, &mut |_| true);
        assert_eq!(out, Err("the rest failed"));
    }

    #[test]
    fn a_sink_that_stops_stops_the_reading() {
        let mut tables_seen = 0;
        let endless = counting(1, i64::MAX, 1, None);
        let out = read_rest_beside(numbered(0, 1), endless, &mut |_| {
            tables_seen += 1;
            tables_seen < 3
        });
        assert_eq!(out, Ok(()));
        assert_eq!(tables_seen, 3);
    }
}
