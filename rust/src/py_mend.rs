//! `file_problems` and `mend_schema`: a damaged `state.db` looked at and
//! mended on the file (`store/sqlite/mend.rs`), for `hermes sessions repair`,
//! with the GIL released.

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::store::sqlite::mend::{self, Mended};

/// What is wrong with the SQLite file at `path`, each as SQLite says it:
/// empty when its schema reads and `PRAGMA integrity_check` finds nothing.
#[pyfunction]
pub fn file_problems(py: Python<'_>, path: PathBuf) -> PyResult<Vec<String>> {
    Ok(py.detach(|| mend::problems(&path))?)
}

/// Mends the schema of the SQLite file at `path`, least destructive first;
/// returns how: `"healthy"` (nothing to do), `"duplicates_removed"` (a
/// definition held twice) or `"search_index_dropped"` (the next open
/// creates it again, empty). Sessions and messages are never touched.
#[pyfunction]
pub fn mend_schema(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let mended = py.detach(|| mend::mend_schema(&path))?;
    Ok(match mended {
        Mended::Healthy => "healthy",
        Mended::DuplicatesRemoved(_) => "duplicates_removed",
        Mended::SearchIndexDropped => "search_index_dropped",
    }
    .to_owned())
}
