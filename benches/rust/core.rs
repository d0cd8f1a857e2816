//! Criterion benches of the Rust core, run in an embedded CPython (`cargo
//! bench --bench core`; `-- --quick` for a faster, rougher pass):
//!
//! * `tracker/plan`: what a flush must write, over a live list of 10,000
//!   dicts: all of them new (a first flush), and none new (the no-op
//!   re-flush every exit path of the agent makes);
//! * `encode` and `decode` of a 20-message turn: message dicts to rows, and
//!   rows (as a transcript load reads them) to conversation dicts;
//! * `flush`: a 20-message turn through `Store.flush` into a temporary file,
//!   at FULL and NORMAL (plan, encode, one commit: the agent's flush);
//! * `load`: `Store.get_conversation` of a 10,000-message transcript.
//!
//! The store and tracker are driven through their Python classes, as the
//! package drives them; the tracker, encoder and decoder are called directly.
//! Messages come from `benches/workload.py`, as for every other benchmark.
//! Short measurement times keep a whole `cargo bench` to about a minute here;
//! the side-by-side figures against the peers come from `benches/run.py`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, BatchSize, Criterion};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict, PyList};
use rusqlite::types::ValueRef as SqlRef;
use rusqlite::Connection;

use _core::decode;
use _core::encode::{self, Warnings};
use _core::model::{Table, ValueRef, CONVERSATION_COLUMNS};
use _core::py_store::{FlushTracker, Store};
use _core::tracker::{Known, Tracker};

const TURN: usize = 20;
const LONG: usize = 10_000;

/// Messages `start..stop` of `benches/workload.py`, fresh dicts.
fn messages<'py>(py: Python<'py>, start: usize, stop: usize) -> Bound<'py, PyList> {
    // sys.path holds strings: a Path object there is skipped by the import system.
    let benches = concat!(env!("CARGO_MANIFEST_DIR"), "/benches");
    let path = py.import("sys").unwrap().getattr("path").unwrap();
    if !path.contains(benches).unwrap() {
        path.call_method1("insert", (0, benches)).unwrap();
    }
    py.import("workload")
        .and_then(|w| w.call_method1("messages", (start, stop)))
        .and_then(|list| list.cast_into::<PyList>().map_err(PyErr::from))
        .expect("benches/workload.py")
}

/// A store on a new file in `dir`, with one session.
fn store<'py>(py: Python<'py>, dir: &Path, synchronous: &str) -> Bound<'py, PyAny> {
    let path = dir.join(format!("{synchronous}.db"));
    let options = [("synchronous", synchronous)].into_py_dict(py).unwrap();
    let store = py
        .get_type::<Store>()
        .call((path,), Some(&options))
        .expect("open a store");
    store.call_method1("create_session", ("s", "cli")).unwrap();
    store
}

/// The rows of session `s` in the columns a transcript load reads, as the
/// store hands them to the decoder.
fn conversation_table(file: &Path) -> Table {
    let conn = Connection::open(file).unwrap();
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {CONVERSATION_COLUMNS} FROM messages WHERE session_id = 's' ORDER BY id"
        ))
        .unwrap();
    let columns: Arc<[String]> = stmt.column_names().map(str::to_owned).collect();
    let mut table = Table::new(columns);
    let width = stmt.column_count();
    let mut rows = stmt.query([]).unwrap();
    while let Some(row) = rows.next().unwrap() {
        for i in 0..width {
            table.push(match row.get_ref(i).unwrap() {
                SqlRef::Null => ValueRef::Null,
                SqlRef::Integer(v) => ValueRef::Integer(v),
                SqlRef::Real(v) => ValueRef::Real(v),
                SqlRef::Text(v) => ValueRef::Text(v),
                SqlRef::Blob(v) => ValueRef::Blob(v),
            });
        }
    }
    table
}

fn tracker(c: &mut Criterion) {
    Python::attach(|py| {
        let live = messages(py, 0, LONG);
        let known = Known {
            history: None,
            seed: None,
        };
        let mut group = c.benchmark_group("tracker/plan");
        let fresh = Tracker::default();
        group.bench_function("10,000 dicts, all new", |b| {
            b.iter(|| fresh.plan(&live, &known).new.len())
        });
        let mut flushed = Tracker::default();
        flushed.switch_session("s");
        let plan = flushed.plan(&live, &known);
        flushed.commit(plan);
        group.bench_function("10,000 dicts, none new", |b| {
            b.iter(|| flushed.plan(&live, &known).new.len())
        });
        group.finish();
    });
}

fn codec(c: &mut Criterion) {
    Python::attach(|py| {
        let turn = messages(py, 0, TURN);
        let dicts: Vec<Bound<'_, PyDict>> = turn.iter().map(|m| m.cast_into().unwrap()).collect();
        c.bench_function("encode/20-message turn", |b| {
            b.iter(|| {
                let mut warnings = Warnings::default();
                dicts
                    .iter()
                    .map(|d| encode::message(d, 1.0e9, &mut warnings).unwrap())
                    .collect::<Vec<_>>()
            })
        });
        let dir = tempfile::tempdir().unwrap();
        let db = store(py, dir.path(), "NORMAL");
        db.call_method1("append", ("s", &turn)).unwrap();
        db.call_method0("close").unwrap();
        let table = conversation_table(&dir.path().join("NORMAL.db"));
        assert_eq!(table.row_count(), TURN);
        c.bench_function("decode/20-message turn", |b| {
            b.iter(|| {
                table
                    .rows()
                    .map(|r| decode::conversation_message(py, r).unwrap())
                    .collect::<Vec<_>>()
            })
        });
    });
}

fn flush(c: &mut Criterion) {
    Python::attach(|py| {
        let dir = tempfile::tempdir().unwrap();
        let mut group = c.benchmark_group("flush/20-message turn");
        for synchronous in ["FULL", "NORMAL"] {
            let db = store(py, dir.path(), synchronous);
            let tracker = py.get_type::<FlushTracker>().call0().unwrap();
            let live = PyList::empty(py);
            let mut next = 0;
            group.bench_function(synchronous, |b| {
                b.iter_batched(
                    || {
                        next += TURN;
                        messages(py, next - TURN, next)
                    },
                    |turn| {
                        live.call_method1("extend", (turn,)).unwrap();
                        db.call_method1("flush", (&tracker, "s", &live)).unwrap()
                    },
                    BatchSize::SmallInput,
                )
            });
            db.call_method0("close").unwrap();
        }
        group.finish();
    });
}

fn load(c: &mut Criterion) {
    Python::attach(|py| {
        let dir = tempfile::tempdir().unwrap();
        let db = store(py, dir.path(), "NORMAL");
        for start in (0..LONG).step_by(1000) {
            db.call_method1("append", ("s", messages(py, start, start + 1000)))
                .unwrap();
        }
        // A search first indexes every row still pending: no indexing runs beside the loads.
        db.call_method1("search", ("\"settle no such words\"",))
            .unwrap();
        c.bench_function("load/10,000-message transcript", |b| {
            b.iter(|| db.call_method1("get_conversation", ("s",)).unwrap())
        });
        db.call_method0("close").unwrap();
    });
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! {
    name = core;
    config = config();
    targets = tracker, codec, flush, load
}

fn main() {
    Python::initialize();
    core();
    Criterion::default().configure_from_args().final_summary();
}
