//! The Python face of the core: `Store` and `FlushTracker`.
//!
//! `Store` has the generic `query` / `count` / `write` over the typed
//! operations (built by `py_ops.rs`), and dedicated methods for the hot
//! paths. Each method converts its Python arguments to owned Rust values
//! while holding the GIL, releases it (`py.detach`) for the SQL, fsync and
//! busy waits, then converts the result back.

use std::path::PathBuf;
use std::sync::{Mutex, TryLockError};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::decode::{self, RowKeys};
use crate::encode::{self, Warnings};
use crate::error::Error;
use crate::exceptions::MessageEncodeError;
use crate::model::{self, NewMessage, RowRef, Table, Value, ValueRef};
use crate::py_ops;
use crate::store::{
    self, Assign, Backend, Durability, Filter, IndexUpkeep, Insert, NoMatch, OnConflict, Options,
    Page, Query, Relation, Search, SearchOrder, Term, Update, WriteOp, WriteOut,
};
use crate::tracker::{AddressSet, Known, Plan, Tracker};

/// An open `state.db`. Thread-safe; share one per process.
#[pyclass(frozen, module = "hermes._core")]
pub struct Store {
    backend: Box<dyn Backend>,
}

/// Remembers, by object identity, which of one agent's message dicts are
/// already in the database.
#[pyclass(frozen, module = "hermes._core")]
pub struct FlushTracker {
    inner: Mutex<Tracker>,
}

thread_local! {
    /// Whether writes made on this thread may wait for other writers (see
    /// [`set_writes_wait`]).
    static WRITES_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Sets whether writes made on the calling thread, to any store, may wait for
/// other writers; returns the previous setting. An event loop turns waiting
/// off around a short write, which then either starts at once or fails with
/// `WriterBusyError` having written nothing.
#[pyfunction]
pub fn set_writes_wait(wait: bool) -> bool {
    WRITES_WAIT.replace(wait)
}

fn log_warnings(py: Python<'_>, context: &str, warnings: &Warnings) {
    if warnings.0.is_empty() {
        return;
    }
    let logged = py.import("logging").and_then(|logging| {
        logging
            .call_method1("getLogger", ("hermes.state",))?
            .call_method1(
                "warning",
                (
                    "%s: stored in a substitute form: %s",
                    context,
                    warnings.0.join("; "),
                ),
            )
    });
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}

/// A sequence as a list, reusing it when it already is one.
fn as_list<'py>(seq: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    match seq.cast::<PyList>() {
        Ok(list) => Ok(list.clone()),
        Err(_) => PyList::new(seq.py(), seq.try_iter()?.collect::<PyResult<Vec<_>>>()?),
    }
}

pub fn encode_messages<'py>(
    py: Python<'py>,
    session_id: &str,
    dicts: impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
) -> PyResult<Vec<NewMessage>> {
    let now = model::now();
    let mut warnings = Warnings::default();
    let mut rows = Vec::new();
    for (index, item) in dicts.enumerate() {
        let item = item?;
        let dict = item.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "message {index} of session {session_id:?} is a {}, not a dict; pass message dicts like {{\"role\": \"user\", \"content\": \"...\"}}",
                item.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        let row = encode::message(dict, now, &mut warnings).map_err(|e| {
            MessageEncodeError::new_err(format!(
                "message {index} of session {session_id:?} could not be encoded: {e}; nothing was written"
            ))
        })?;
        rows.push(row);
    }
    log_warnings(py, &format!("session {session_id:?}"), &warnings);
    Ok(rows)
}

/// Pauses Python's cyclic garbage collector while it lives. The dicts and
/// lists built from rows hold only strings, numbers and other such
/// containers (no cycles), so collector passes triggered by allocating
/// thousands of them are pure cost: a third of a long transcript's load.
struct GcPause {
    was_enabled: bool,
}

impl GcPause {
    fn new(_py: Python<'_>) -> Self {
        // SAFETY: the GIL is held (a `Python` token exists).
        let was_enabled = unsafe { pyo3::ffi::PyGC_Disable() } == 1;
        GcPause { was_enabled }
    }
}

impl Drop for GcPause {
    fn drop(&mut self) {
        if self.was_enabled {
            // SAFETY: dropped on the thread that made it, still holding the GIL.
            unsafe { pyo3::ffi::PyGC_Enable() };
        }
    }
}

fn rows_to_list<'py>(
    py: Python<'py>,
    table: &Table,
    convert: impl Fn(Python<'py>, RowRef<'_>, &RowKeys<'py>) -> PyResult<Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyList>> {
    let _pause = GcPause::new(py);
    let keys = RowKeys::new(py, &table.columns)?;
    let list = PyList::empty(py);
    for r in table.rows() {
        list.append(convert(py, r, &keys)?)?;
    }
    Ok(list)
}

impl Store {
    fn commit(&self, py: Python<'_>, op: WriteOp) -> PyResult<WriteOut> {
        let backend = &*self.backend;
        if WRITES_WAIT.get() {
            Ok(py.detach(|| backend.write(op))?)
        } else {
            Ok(py.detach(|| backend.write_now(op))?)
        }
    }

    fn ids(out: WriteOut) -> Vec<i64> {
        match out {
            WriteOut::Ids(ids) => ids,
            _ => Vec::new(),
        }
    }

    fn rows<'py>(&self, py: Python<'py>, query: &Query) -> PyResult<Bound<'py, PyList>> {
        let backend = &*self.backend;
        let rows = py.detach(|| backend.query(query))?;
        if query.relation == Relation::Messages {
            rows_to_list(py, &rows, decode::message_row)
        } else {
            rows_to_list(py, &rows, decode::row)
        }
    }
}

/// Text read back from a column that holds text (another writer's bytes
/// decoded leniently).
fn text_cell(cell: ValueRef<'_>) -> String {
    match cell {
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Integer(n) => n.to_string(),
        ValueRef::Real(x) => x.to_string(),
        ValueRef::Null => String::new(),
    }
}

#[pymethods]
impl Store {
    /// Opens the store at `location`: a `state.db` path, or a `postgresql://` URL.
    #[new]
    #[pyo3(signature = (location, *, synchronous = "FULL", busy_budget = 10.0))]
    fn new(
        py: Python<'_>,
        location: PathBuf,
        synchronous: &str,
        busy_budget: f64,
    ) -> PyResult<Self> {
        let durability = Durability::parse(synchronous).ok_or_else(|| {
            Error::Config(format!(
                "synchronous={synchronous:?} is not supported; use \"FULL\" (durable on power loss) or \"NORMAL\""
            ))
        })?;
        if !(busy_budget.is_finite() && busy_budget >= 0.0) {
            return Err(Error::Config(format!(
                "busy_budget={busy_budget} must be a number of seconds >= 0"
            ))
            .into());
        }
        let options = Options {
            durability,
            busy_budget: Duration::from_secs_f64(busy_budget),
        };
        let backend = py.detach(|| store::open(location.as_os_str(), options))?;
        Ok(Store { backend })
    }

    /// Where the store keeps its data (a path, or a URL without its password).
    #[getter]
    fn location(&self) -> String {
        self.backend.location().to_string()
    }

    /// The columns `relation` has in this store.
    fn columns(&self, relation: &str) -> PyResult<Vec<String>> {
        let relation = py_ops::relation(relation)?;
        Ok(self.backend.columns().of(relation).to_vec())
    }

    /// Rows of `relation`: `columns` (derived values too, `"*"` for every
    /// column; None: every column), those `where` matches (a filter tuple), ordered by
    /// `order_by` (`"-name"` descending), one page.
    #[pyo3(signature = (relation, *, columns = None, r#where = None, order_by = Vec::new(), limit = None, offset = 0))]
    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        &self,
        py: Python<'py>,
        relation: &str,
        columns: Option<Vec<String>>,
        r#where: Option<&Bound<'py, PyAny>>,
        order_by: Vec<String>,
        limit: Option<i64>,
        offset: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let relation = py_ops::relation(relation)?;
        let query = Query {
            relation,
            select: py_ops::terms(
                relation,
                &columns.unwrap_or_default(),
                self.backend.columns().of(relation),
            ),
            filter: py_ops::filter(relation, r#where)?,
            order: py_ops::order(relation, &order_by),
            limit,
            offset,
        };
        self.rows(py, &query)
    }

    /// How many rows of `relation` `where` matches.
    #[pyo3(signature = (relation, r#where = None))]
    fn count(
        &self,
        py: Python<'_>,
        relation: &str,
        r#where: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<i64> {
        let relation = py_ops::relation(relation)?;
        let filter = py_ops::filter(relation, r#where)?;
        let backend = &*self.backend;
        Ok(py.detach(|| backend.count(relation, &filter))?)
    }

    /// Runs `ops` (Insert, Update, Delete, Append) in one transaction, all
    /// or none; returns the rows each wrote.
    fn write(&self, py: Python<'_>, ops: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        match self.commit(py, py_ops::transaction(ops)?)? {
            WriteOut::Many(outs) => Ok(outs.iter().map(WriteOut::rows).collect()),
            other => Ok(vec![other.rows()]),
        }
    }

    /// Copies up to `limit` rows of `relation` (those `where` matches, with a
    /// key after `after`, in key order) into `target` as this store holds
    /// them: the `columns` named, which must include the key. A row whose
    /// key `target` has already is left as it is there. Returns the rows
    /// read, the rows written, and the last key read (the next page's
    /// `after`; None when nothing was left to read).
    #[pyo3(signature = (target, relation, *, columns, after = None, r#where = None, limit = 1000))]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn copy_to<'py>(
        &self,
        py: Python<'py>,
        target: &Bound<'py, Store>,
        relation: &str,
        columns: Vec<String>,
        after: Option<Vec<Bound<'py, PyAny>>>,
        r#where: Option<&Bound<'py, PyAny>>,
        limit: i64,
    ) -> PyResult<(usize, u64, Option<Bound<'py, PyTuple>>)> {
        let relation = py_ops::relation(relation)?;
        let filter = py_ops::filter(relation, r#where)?;
        let after = after
            .map(|key| key.iter().map(py_ops::scalar).collect::<PyResult<Vec<_>>>())
            .transpose()?;
        if limit <= 0 {
            return Err(PyValueError::new_err(format!(
                "limit={limit}: a copy reads at least one row a page"
            )));
        }
        let (source, target) = (&*self.backend, &*target.get().backend);
        let copied = py.detach(|| {
            store::copy::copy_page(
                source,
                target,
                relation,
                &columns,
                &filter,
                after.as_deref(),
                limit,
            )
        })?;
        let last_key = copied
            .last_key
            .map(|key| {
                let cells = key
                    .iter()
                    .map(|v| decode::value(py, v.as_ref()))
                    .collect::<PyResult<Vec<_>>>()?;
                PyTuple::new(py, cells)
            })
            .transpose()?;
        Ok((copied.read, copied.written, last_key))
    }

    /// Inserts a session row; when it exists, fills only its NULL columns.
    #[pyo3(signature = (session_id, source, columns = None, started_at = None))]
    fn create_session(
        &self,
        py: Python<'_>,
        session_id: String,
        source: String,
        columns: Option<&Bound<'_, PyDict>>,
        started_at: Option<f64>,
    ) -> PyResult<()> {
        let mut values = vec![
            ("id".to_owned(), Value::Text(session_id)),
            ("source".to_owned(), Value::Text(source)),
            (
                "started_at".to_owned(),
                Value::Real(started_at.unwrap_or_else(model::now)),
            ),
        ];
        if let Some(columns) = columns {
            values.extend(py_ops::column_values(columns.as_any())?);
        }
        let op = WriteOp::Insert(Insert {
            relation: Relation::Sessions,
            values,
            on_conflict: OnConflict::FillNulls,
        });
        self.commit(py, op).map(drop)
    }

    /// Sets columns of a session row.
    fn update_session(
        &self,
        py: Python<'_>,
        session_id: String,
        columns: &Bound<'_, PyDict>,
    ) -> PyResult<()> {
        let set = py_ops::column_values(columns.as_any())?
            .into_iter()
            .map(|(c, v)| (c, Assign::Value(v)))
            .collect();
        let op = WriteOp::Update(Update {
            relation: Relation::Sessions,
            filter: Filter::eq("id", session_id.as_str()),
            set,
            must_match: Some(NoMatch::Session(session_id)),
        });
        self.commit(py, op).map(drop)
    }

    /// Appends message dicts in order, in one transaction with the counters.
    /// With `once_key`, a repeat of the same key writes nothing.
    #[pyo3(signature = (session_id, messages, once_key = None))]
    fn append(
        &self,
        py: Python<'_>,
        session_id: String,
        messages: &Bound<'_, PyAny>,
        once_key: Option<String>,
    ) -> PyResult<Vec<i64>> {
        let rows = encode_messages(py, &session_id, messages.try_iter()?)?;
        let op = WriteOp::Append {
            session_id,
            rows,
            once_key,
        };
        self.commit(py, op).map(Self::ids)
    }

    /// Writes every dict of `messages` not yet persisted (by identity; see
    /// `FlushTracker`) in one transaction. Returns how many were written.
    /// On failure nothing is committed and the tracker is unchanged.
    #[pyo3(signature = (tracker, session_id, messages, history = None, seed = None))]
    fn flush(
        &self,
        py: Python<'_>,
        tracker: &Bound<'_, FlushTracker>,
        session_id: String,
        messages: &Bound<'_, PyAny>,
        history: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let mut state = tracker.get().lock()?;
        let plan = plan_flush(&mut state, &session_id, messages, history, seed)?;
        let written = plan.new.len();
        if written > 0 {
            let rows = encode_messages(
                py,
                &session_id,
                plan.new.iter().map(|d| Ok(d.clone().into_any())),
            )?;
            let op = WriteOp::Append {
                session_id,
                rows,
                once_key: None,
            };
            self.commit(py, op)?;
        }
        state.commit(plan);
        Ok(written)
    }

    fn get_session<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let backend = &*self.backend;
        let table = py.detach(|| backend.session(session_id))?;
        let keys = RowKeys::new(py, &table.columns)?;
        let row = table
            .rows()
            .next()
            .map(|r| decode::row(py, r, &keys))
            .transpose();
        row
    }

    /// The live `message_count` (None if the session does not exist).
    fn live_message_count(&self, py: Python<'_>, session_id: &str) -> PyResult<Option<i64>> {
        let backend = &*self.backend;
        Ok(py.detach(|| backend.live_message_count(session_id))?)
    }

    /// How many message rows this store has committed to the session since
    /// it was opened. With `message_count` it separates this process's
    /// writes from other processes'.
    fn own_appends(&self, session_id: &str) -> u64 {
        self.backend.own_appends(session_id)
    }

    /// True when another connection (process, CLI, cron) committed since the
    /// previous call.
    fn foreign_commit_since_last_look(&self, py: Python<'_>) -> PyResult<bool> {
        let backend = &*self.backend;
        Ok(py.detach(|| backend.foreign_commit_since_last_look())?)
    }

    /// Raw message rows (structured columns decoded), ordered by id.
    #[pyo3(signature = (session_id, include_inactive = false))]
    fn get_messages<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
        include_inactive: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let backend = &*self.backend;
        let rows = py.detach(|| backend.messages(session_id, include_inactive))?;
        rows_to_list(py, &rows, decode::message_row)
    }

    /// Messages in the OpenAI conversation shape, ordered by id. The content
    /// of a user or assistant message that names the recalled-memory fence
    /// is passed through `mend_leaked_memory` (the face's rule), if given.
    #[pyo3(signature = (session_id, include_inactive = false, mend_leaked_memory = None))]
    fn get_conversation<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
        include_inactive: bool,
        mend_leaked_memory: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let _pause = GcPause::new(py);
        let backend = &*self.backend;
        let list = PyList::empty(py).unbind();
        let mut failed = None;
        py.detach(|| {
            backend.conversation(session_id, include_inactive, &mut |table| {
                // Each table becomes dicts as it arrives, with the GIL taken
                // back for it (and given up again while the next is read).
                Python::attach(|py| {
                    let list = list.bind(py);
                    for r in table.rows() {
                        let message = decode::conversation_message(py, r)?;
                        if let Some(mend) = &mend_leaked_memory {
                            if decode::may_hold_leaked_memory(r) {
                                let content = pyo3::intern!(py, "content");
                                let leaky = message.get_item(content)?;
                                message.set_item(content, mend.call1(py, (leaky,))?)?;
                            }
                        }
                        list.append(message)?;
                    }
                    Ok::<_, PyErr>(())
                })
                .map_err(|e| failed = Some(e))
                .is_ok()
            })
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(list.into_bound(py)),
        }
    }

    /// Sessions, newest first.
    #[pyo3(signature = (source = None, limit = 50, offset = 0))]
    fn list_sessions<'py>(
        &self,
        py: Python<'py>,
        source: Option<String>,
        limit: i64,
        offset: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let page = Page {
            source,
            session_id: None,
            limit,
            offset,
        };
        let backend = &*self.backend;
        let rows = py.detach(|| backend.list_sessions(&page))?;
        rows_to_list(py, &rows, decode::row)
    }

    /// Messages matching a search as a person types it (`store::search`).
    #[pyo3(signature = (
        query, *, sources = None, exclude_sources = None, roles = None, session_id = None,
        sort = None, include_inactive = false, limit = 20, offset = 0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyString>,
        sources: Option<Vec<String>>,
        exclude_sources: Option<Vec<String>>,
        roles: Option<Vec<String>>,
        session_id: Option<String>,
        sort: Option<String>,
        include_inactive: bool,
        limit: i64,
        offset: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let search = Search {
            // Lone surrogates (text pasted from a broken source) become U+FFFD.
            query: query.to_string_lossy().into_owned(),
            sources,
            exclude_sources,
            roles,
            session_id,
            order: SearchOrder::parse(sort.as_deref()),
            include_inactive,
            limit,
            offset,
        };
        let backend = &*self.backend;
        let rows = py.detach(|| backend.search(&search))?;
        rows_to_list(py, &rows, decode::message_row)
    }

    fn has_platform_message_id(
        &self,
        py: Python<'_>,
        session_id: &str,
        platform_message_id: &str,
    ) -> PyResult<bool> {
        let backend = &*self.backend;
        Ok(py.detach(|| backend.has_platform_message_id(session_id, platform_message_id))?)
    }

    fn get_meta(&self, py: Python<'_>, key: &str) -> PyResult<Option<String>> {
        let query = Query {
            relation: Relation::StateMeta,
            select: vec![Term::Column("value".into())],
            filter: Filter::eq("key", key),
            order: Vec::new(),
            limit: Some(1),
            offset: 0,
        };
        let backend = &*self.backend;
        let table = py.detach(|| backend.query(&query))?;
        let value = table.rows().next().and_then(|r| match r.get(0) {
            ValueRef::Null => None,
            cell => Some(text_cell(cell)),
        });
        Ok(value)
    }

    fn set_meta(&self, py: Python<'_>, key: String, value: String) -> PyResult<()> {
        let op = WriteOp::Insert(Insert {
            relation: Relation::StateMeta,
            values: vec![("key".into(), key.into()), ("value".into(), value.into())],
            on_conflict: OnConflict::Replace,
        });
        self.commit(py, op).map(drop)
    }

    /// Optimizes (`"optimize"`) or rebuilds (`"rebuild"`) every search index;
    /// returns how many there are.
    fn search_index_upkeep(&self, py: Python<'_>, upkeep: &str) -> PyResult<u64> {
        let upkeep = match upkeep {
            "optimize" => IndexUpkeep::Optimize,
            "rebuild" => IndexUpkeep::Rebuild,
            other => {
                return Err(PyValueError::new_err(format!(
                    "search index upkeep {other:?}: use \"optimize\" or \"rebuild\""
                )))
            }
        };
        Ok(self.commit(py, WriteOp::SearchIndex(upkeep))?.rows())
    }

    /// Closes every connection; later calls raise `DatabaseClosedError`.
    /// A truncating WAL checkpoint, then `VACUUM`: the file shrinks to its rows.
    fn vacuum(&self, py: Python<'_>) -> PyResult<()> {
        let backend = &*self.backend;
        Ok(py.detach(|| backend.vacuum())?)
    }

    fn close(&self, py: Python<'_>) {
        let backend = &*self.backend;
        py.detach(|| backend.close());
    }
}

fn seed_addresses(seed: &Bound<'_, PyAny>) -> PyResult<AddressSet> {
    let mut out = AddressSet::default();
    for item in seed.try_iter()? {
        // id() values are non-negative and fit in usize; anything else
        // cannot name a live object and is ignored.
        if let Ok(addr) = item?.extract::<usize>() {
            out.insert(addr);
        }
    }
    Ok(out)
}

/// Plans a flush of `messages` for `session_id` (switching the tracker to
/// that session first, which forgets another session's objects).
fn plan_flush<'py>(
    state: &mut Tracker,
    session_id: &str,
    messages: &Bound<'py, PyAny>,
    history: Option<&Bound<'py, PyAny>>,
    seed: Option<&Bound<'py, PyAny>>,
) -> PyResult<Plan<'py>> {
    state.switch_session(session_id);
    let live = as_list(messages)?;
    let history = history.map(as_list).transpose()?;
    let seed = seed.map(seed_addresses).transpose()?;
    Ok(state.plan(
        &live,
        &Known {
            history: history.as_ref(),
            seed: seed.as_ref(),
        },
    ))
}

impl FlushTracker {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Tracker>> {
        match self.inner.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "another thread is flushing this agent's transcript; serialize flushes per agent (AIAgent does this with its persist lock)",
            )),
        }
    }
}

#[pymethods]
impl FlushTracker {
    #[new]
    fn new() -> Self {
        FlushTracker {
            inner: Mutex::new(Tracker::default()),
        }
    }

    /// The session the tracked objects belong to.
    #[getter]
    fn session_id(&self) -> PyResult<Option<String>> {
        Ok(self.lock()?.session_id().map(str::to_owned))
    }

    /// How many message objects are remembered as persisted.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.lock()?.tracked_len())
    }

    /// The dicts the next flush of `messages` would write, in order.
    #[pyo3(signature = (session_id, messages, history = None, seed = None))]
    fn pending<'py>(
        &self,
        session_id: &str,
        messages: &Bound<'py, PyAny>,
        history: Option<&Bound<'py, PyAny>>,
        seed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut state = self.lock()?;
        Ok(plan_flush(&mut state, session_id, messages, history, seed)?.new)
    }

    /// Records `messages` as persisted without writing them (they went to
    /// the recovery spool instead).
    #[pyo3(signature = (session_id, messages, history = None, seed = None))]
    fn mark_persisted(
        &self,
        session_id: &str,
        messages: &Bound<'_, PyAny>,
        history: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut state = self.lock()?;
        let plan = plan_flush(&mut state, session_id, messages, history, seed)?;
        state.commit(plan);
        Ok(())
    }
}
