//! Which of an agent's live message dicts are already in the database.
//!
//! Identity, not position: a dict is persisted once, however many exit
//! paths flush the list and however the list is repaired around it. The
//! tracker holds a strong reference to every object it remembers, so a
//! freed dict's address can never be reused by a new message while it is
//! tracked (the `id()`-set design skipped such messages silently).
//!
//! It also remembers the live list as it was at the last successful flush.
//! When the list only grew since then (the normal case) the old part is
//! checked by comparing pointers, so a no-op re-flush of a long transcript
//! costs a pointer sweep, not a hash lookup per message. When the list was
//! replaced or compacted, everything is re-checked by identity and objects
//! no longer in the list are released, so memory tracks the live list
//! (the last 1,024 released stay recognised, so a dict popped and put back
//! is not written twice).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Object addresses are already well spread; hashing them again is waste.
#[derive(Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only usize keys are hashed")
    }
    fn write_usize(&mut self, n: usize) {
        // Objects are 16-byte aligned; fold the high bits into the low ones.
        self.0 = (n as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub type AddressSet = HashSet<usize, BuildHasherDefault<AddressHasher>>;
type AddressMap<V> = HashMap<usize, V, BuildHasherDefault<AddressHasher>>;

/// Keys that mark a dict as the agent's private retry scaffolding, which
/// must never reach the durable transcript.
pub const SCAFFOLDING_FLAGS: [&str; 3] = [
    "_ephemeral",
    "_empty_recovery_synthetic",
    "_empty_terminal_sentinel",
];

fn is_scaffolding(d: &Bound<'_, PyDict>) -> bool {
    SCAFFOLDING_FLAGS.iter().any(|flag| {
        d.get_item(flag)
            .ok()
            .flatten()
            .is_some_and(|v| v.is_truthy().unwrap_or(false))
    })
}

fn address(obj: &Bound<'_, PyAny>) -> usize {
    obj.as_ptr() as usize
}

/// The tracker's remembered state for one agent.
#[derive(Default)]
pub struct Tracker {
    session_id: Option<String>,
    /// Every item of the live list at the last successful flush, in order.
    snapshot: Vec<Py<PyAny>>,
    /// Dicts known to be in the database, keyed by address, kept alive.
    persisted: AddressMap<Py<PyAny>>,
    /// Persisted dicts that left the live list most recently, oldest first,
    /// still kept alive and recognised: a dict popped and put back (a
    /// repair step, a retry) is not written twice. Bounded, so replacing
    /// the list still releases memory.
    retired: std::collections::VecDeque<Py<PyAny>>,
    retired_addresses: AddressSet,
}

/// The items of `list`, read in place: a sweep through `PyList_GetItem`
/// costs ~2.4 ns a message (240 µs per flush of a 100k-message transcript),
/// this ~0.5 ns. Valid while the GIL is held and no Python code runs.
fn list_items<'a>(list: &'a Bound<'_, PyList>) -> &'a [*mut ffi::PyObject] {
    // SAFETY: `list` is a list object; the GIL is held, so it is not resized
    // while the slice is read.
    unsafe {
        let raw = list.as_ptr().cast::<ffi::PyListObject>();
        let len = usize::try_from((*raw).ob_base.ob_size).unwrap_or(0);
        if len == 0 {
            &[]
        } else {
            std::slice::from_raw_parts((*raw).ob_item, len)
        }
    }
}

/// Index of the first place `a` and `b` (of equal length) differ, or their
/// length. Compares a block at a time so that the common case, no
/// difference, runs at memory speed.
fn first_difference(a: &[*mut ffi::PyObject], b: &[*mut ffi::PyObject]) -> usize {
    const BLOCK: usize = 64;
    let mut start = 0;
    for (x, y) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
        if x != y {
            return start + x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(0);
        }
        start += x.len();
    }
    start
}

/// How many released dicts stay recognised.
const RETIRED_CAPACITY: usize = 1024;

/// What a flush must write, and how the tracker changes if it succeeds.
pub struct Plan<'py> {
    /// The dicts to write, in list order.
    pub new: Vec<Bound<'py, PyDict>>,
    /// Dicts to remember as persisted without writing (history, seed).
    already: Vec<Bound<'py, PyAny>>,
    /// The items scanned, captured when planning: the whole list when
    /// `rebuilt`, else what follows the snapshot. Items appended by another
    /// thread while the rows are written are not in it, so they are never
    /// mistaken for persisted.
    scanned: Vec<Bound<'py, PyAny>>,
    /// True when the old snapshot was not a prefix of the live list, so the
    /// persisted set must be rebuilt from the live list.
    rebuilt: bool,
}

/// Sources of "already persisted" besides the tracker's own memory.
pub struct Known<'a, 'py> {
    /// Loaded from the database: objects of `conversation_history`.
    pub history: Option<&'a Bound<'py, PyList>>,
    /// The one-shot seed of `id()` values, when its conditions hold.
    pub seed: Option<&'a AddressSet>,
}

impl Tracker {
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Forgets everything when the agent moved to another session.
    pub fn switch_session(&mut self, session_id: &str) {
        if self.session_id.as_deref() != Some(session_id) {
            self.session_id = Some(session_id.to_owned());
            self.snapshot.clear();
            self.persisted.clear();
            self.retired.clear();
            self.retired_addresses.clear();
        }
    }

    pub fn tracked_len(&self) -> usize {
        self.persisted.len()
    }

    /// Length of the prefix of `live` that is identical to the snapshot.
    fn unchanged_prefix(&self, live: &Bound<'_, PyList>) -> usize {
        let n = self.snapshot.len().min(live.len());
        // SAFETY: `Py<T>` is `repr(transparent)` over `NonNull<PyObject>`,
        // itself `repr(transparent)` over a pointer.
        let old: &[*mut ffi::PyObject] =
            unsafe { std::slice::from_raw_parts(self.snapshot.as_ptr().cast(), n) };
        first_difference(old, &list_items(live)[..n])
    }

    /// Decides what to write for `live` without changing the tracker.
    pub fn plan<'py>(&self, live: &Bound<'py, PyList>, known: &Known<'_, 'py>) -> Plan<'py> {
        let prefix = self.unchanged_prefix(live);
        let rebuilt = prefix < self.snapshot.len();
        let start = if rebuilt { 0 } else { prefix };
        let mut history: Option<AddressSet> = None;
        let mut seen_new = AddressSet::default();
        let mut new = Vec::new();
        let mut already = Vec::new();
        let scanned: Vec<Bound<'py, PyAny>> = live.iter().skip(start).collect();
        for item in &scanned {
            let Ok(dict) = item.cast::<PyDict>() else {
                continue;
            };
            let addr = address(item);
            if self.persisted.contains_key(&addr) || seen_new.contains(&addr) {
                continue;
            }
            if self.retired_addresses.contains(&addr) {
                seen_new.insert(addr);
                already.push(item.clone());
                continue;
            }
            let in_history = known.history.is_some_and(|h| {
                history
                    .get_or_insert_with(|| h.iter().map(|o| address(&o)).collect())
                    .contains(&addr)
            });
            if in_history || known.seed.is_some_and(|s| s.contains(&addr)) {
                seen_new.insert(addr);
                already.push(item.clone());
                continue;
            }
            seen_new.insert(addr);
            if !is_scaffolding(dict) {
                new.push(dict.clone());
            }
        }
        Plan {
            new,
            already,
            scanned,
            rebuilt,
        }
    }

    /// Records a plan whose rows are now durable.
    pub fn commit(&mut self, plan: Plan<'_>) {
        let remember = plan
            .new
            .into_iter()
            .map(|d| d.into_any())
            .chain(plan.already);
        if plan.rebuilt {
            // Keep only what is still in the live list: compaction frees memory.
            let mut kept = AddressMap::default();
            for obj in remember {
                kept.insert(address(&obj), obj.unbind());
            }
            for item in &plan.scanned {
                let addr = address(item);
                if let Some(obj) = self.persisted.remove(&addr) {
                    kept.insert(addr, obj);
                }
            }
            let released = std::mem::replace(&mut self.persisted, kept);
            for (addr, obj) in released {
                self.retire(addr, obj);
            }
            self.snapshot = plan.scanned.into_iter().map(Bound::unbind).collect();
        } else {
            for obj in remember {
                self.persisted.insert(address(&obj), obj.unbind());
            }
            self.snapshot
                .extend(plan.scanned.into_iter().map(Bound::unbind));
        }
    }

    fn retire(&mut self, addr: usize, obj: Py<PyAny>) {
        if self.retired_addresses.insert(addr) {
            self.retired.push_back(obj);
        }
        if self.retired.len() > RETIRED_CAPACITY {
            if let Some(oldest) = self.retired.pop_front() {
                self.retired_addresses.remove(&(oldest.as_ptr() as usize));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_read_in_place() {
        Python::initialize();
        Python::attach(|py| {
            let objs: Vec<Py<PyAny>> = (0..130)
                .map(|_| PyDict::new(py).into_any().unbind())
                .collect();
            let list = PyList::new(py, &objs).unwrap();
            let expected: Vec<_> = objs.iter().map(|o| o.as_ptr()).collect();
            assert_eq!(list_items(&list), &expected[..]);
            assert!(list_items(&PyList::empty(py)).is_empty());
        });
    }

    #[test]
    fn the_first_difference_is_found_in_every_block() {
        let a: Vec<*mut ffi::PyObject> = (1..=200usize).map(|i| (i * 16) as *mut _).collect();
        assert_eq!(first_difference(&a, &a), 200);
        for at in [0, 1, 63, 64, 65, 127, 128, 199] {
            let mut b = a.clone();
            b[at] = std::ptr::null_mut();
            assert_eq!(first_difference(&a, &b), at);
        }
        assert_eq!(first_difference(&[], &[]), 0);
    }
}
