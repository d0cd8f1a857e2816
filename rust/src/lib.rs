//! `hermes._core`: the session store and transcript flush behind `hermes`.
//! See docs/ARCHITECTURE.md for what each module does.

pub mod decode;
pub mod encode;
pub mod error;
pub mod model;
pub mod py_store;
pub mod pyjson;
pub mod schema;
pub mod store;
pub mod tracker;

use pyo3::prelude::*;

// Transcript loads and flushes allocate many short-lived strings; mimalloc
// keeps that churn out of glibc's arena locks and page zeroing.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule]
mod _core {
    use super::*;

    #[pymodule_export]
    use crate::py_store::{set_writes_wait, FlushTracker, Store};

    #[pymodule_export]
    use crate::error::{
        ConfigError, CorruptDatabaseError, DatabaseClosedError, DatabaseLockedError, DiskFullError,
        HermesError, MessageEncodeError, NotADatabaseError, ReadOnlyDatabaseError,
        SessionNotFoundError, StateDbError, WriterBusyError,
    };

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("SCHEMA_VERSION", crate::schema::SCHEMA_VERSION)?;
        m.add("SCHEMA_SQL", crate::schema::schema_sql())?;
        m.add("SQLITE_VERSION", rusqlite::version())?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add(
            "SCAFFOLDING_FLAGS",
            pyo3::types::PyTuple::new(m.py(), crate::tracker::SCAFFOLDING_FLAGS)?,
        )?;
        Ok(())
    }
}
