//! `hermes._core`: the session store and transcript flush behind `hermes`.
//! See docs/ARCHITECTURE.md for what each module does.
//!
//! `error`, `model` and `store` are plain Rust; the rest is the Python
//! extension, built with the default feature `python`.

mod allocator;
pub mod error;
pub mod model;
pub mod store;

#[cfg(feature = "python")]
pub mod decode;
#[cfg(feature = "python")]
pub mod encode;
#[cfg(feature = "python")]
pub mod exceptions;
#[cfg(feature = "python")]
pub mod py_mend;
#[cfg(feature = "python")]
pub mod py_ops;
#[cfg(feature = "python")]
pub mod py_store;
#[cfg(feature = "python")]
pub mod pyjson;
#[cfg(feature = "python")]
pub mod tracker;

#[cfg(feature = "python")]
#[pyo3::pymodule]
mod _core {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::py_store::{set_writes_wait, FlushTracker, Store};

    #[pymodule_export]
    use crate::py_ops::{Append, Delete, Insert, Select, Update};

    #[pymodule_export]
    use crate::py_mend::{file_problems, mend_schema};

    #[pymodule_export]
    use crate::exceptions::{
        ConfigError, CorruptDatabaseError, DatabaseClosedError, DatabaseLockedError, DiskFullError,
        HermesError, MessageEncodeError, NotADatabaseError, ReadOnlyDatabaseError,
        SearchQueryError, SessionNotFoundError, StateDbError, WriterBusyError,
    };

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("SCHEMA_VERSION", crate::model::SCHEMA_VERSION)?;
        m.add("SCHEMA_SQL", crate::store::sqlite::schema_sql())?;
        m.add("SQLITE_VERSION", crate::store::sqlite::version())?;
        m.add(
            "MAX_FTS5_QUERY_CHARS",
            crate::store::search::MAX_QUERY_CHARS,
        )?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add(
            "SCAFFOLDING_FLAGS",
            pyo3::types::PyTuple::new(m.py(), crate::tracker::SCAFFOLDING_FLAGS)?,
        )?;
        Ok(())
    }
}
