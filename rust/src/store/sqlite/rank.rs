//! The rank of a match of a query that is one phrase (one word, one quoted
//! phrase, one CJK term), as the FTS5 function `hermes_phrase_rank`: FTS5's
//! bm25 without its IDF factor. A query takes it as its `rank` by the
//! constraint [`RANK_MATCH`].
//!
//! bm25 is `-(IDF × part)` summed over the query's phrases, where `part`
//! depends on the row alone (how often the phrase occurs in it, its length
//! against the average). With one phrase the IDF is one positive factor for
//! every match, so the order of `-part` is bm25's order. FTS5 finds the IDF
//! by running the phrase over the whole index once per query (a second
//! full read of its doclists for a word in most messages, and of their
//! positions for a phrase); this function skips that read. `part` is
//! computed with bm25's own constants and operations, so two matches bm25
//! scores equal score equal here too.

use std::ffi::{c_int, c_void};
use std::ptr;

use rusqlite::{ffi, Connection};

/// The constraint that makes it a query's `rank` (`... AND <table>.rank
/// MATCH <this>`, FTS5's way to choose the rank function of one query).
pub const RANK_MATCH: &str = "'hermes_phrase_rank()'";

/// bm25's parameters as FTS5 fixes them.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Declares `hermes_phrase_rank` on `conn`'s FTS5 tables.
pub fn declare(conn: &Connection) -> rusqlite::Result<()> {
    let failure = |rc: c_int, detail: Option<String>| {
        rusqlite::Error::SqliteFailure(ffi::Error::new(rc), detail)
    };
    let api = super::tokenizer::fts5_api(conn).map_err(|e| failure(ffi::SQLITE_ERROR, Some(e)))?;
    // SAFETY: `api` is the live FTS5 API of `conn`; the name is a static C
    // string and the function has no user data to free.
    let rc = unsafe {
        let create = (*api).xCreateFunction.ok_or_else(|| {
            failure(
                ffi::SQLITE_ERROR,
                Some("FTS5 has no xCreateFunction".into()),
            )
        })?;
        create(
            api,
            c"hermes_phrase_rank".as_ptr(),
            ptr::null_mut::<c_void>(),
            Some(phrase_rank),
            None,
        )
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(failure(rc, None))
    }
}

/// bm25's row part, negated (smaller is better, as FTS5's `rank`), for
/// the row FTS5 is on. Every instance of the phrase counts once, as bm25
/// with no column weights counts it.
unsafe extern "C" fn phrase_rank(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    _n_args: c_int,
    _args: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: FTS5 calls this with its API and the context of the row it
    // is on, both valid for the call.
    let part = unsafe { row_part(&*api, fts) };
    match part {
        Ok(part) => unsafe { ffi::sqlite3_result_double(ctx, -part) },
        Err(rc) => unsafe { ffi::sqlite3_result_error_code(ctx, rc) },
    }
}

/// `f × (k1 + 1) / (f + k1 × (1 - b + b × D / avgdl))`, bm25's per-phrase
/// term before the IDF, with its operations in its order.
unsafe fn row_part(api: &ffi::Fts5ExtensionApi, fts: *mut ffi::Fts5Context) -> Result<f64, c_int> {
    let call = |rc: c_int| {
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(rc)
        }
    };
    let (Some(inst_count), Some(column_size)) = (api.xInstCount, api.xColumnSize) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // SAFETY: as for `avgdl`.
    let avgdl = unsafe { avgdl(api, fts)? };
    let (mut instances, mut tokens): (c_int, c_int) = (0, 0);
    // SAFETY: the out-pointers are locals alive for each call.
    unsafe {
        call(inst_count(fts, &mut instances))?;
        call(column_size(fts, -1, &mut tokens))?;
    }
    let (f, d) = (f64::from(instances), f64::from(tokens));
    Ok((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * d / avgdl)))
}

/// The average row length in tokens, read once per query and kept in its
/// aux data (as bm25 keeps it): FTS5 reads the table's totals from the
/// index on every call that asks for them.
unsafe fn avgdl(api: &ffi::Fts5ExtensionApi, fts: *mut ffi::Fts5Context) -> Result<f64, c_int> {
    let (Some(get), Some(set), Some(total_size), Some(row_count)) = (
        api.xGetAuxdata,
        api.xSetAuxdata,
        api.xColumnTotalSize,
        api.xRowCount,
    ) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // SAFETY: the aux data of this function's query is only ever a boxed
    // f64 set below, freed by FTS5 through `free_avgdl`.
    unsafe {
        let kept = get(fts, 0).cast::<f64>();
        if !kept.is_null() {
            return Ok(*kept);
        }
        let (mut all_tokens, mut rows): (i64, i64) = (0, 0);
        for rc in [
            total_size(fts, -1, &mut all_tokens),
            row_count(fts, &mut rows),
        ] {
            if rc != ffi::SQLITE_OK {
                return Err(rc);
            }
        }
        let avgdl = all_tokens as f64 / rows as f64;
        let rc = set(fts, Box::into_raw(Box::new(avgdl)).cast(), Some(free_avgdl));
        if rc != ffi::SQLITE_OK {
            return Err(rc);
        }
        Ok(avgdl)
    }
}

unsafe extern "C" fn free_avgdl(kept: *mut c_void) {
    // SAFETY: `kept` is the box `avgdl` leaked, freed once by FTS5.
    drop(unsafe { Box::from_raw(kept.cast::<f64>()) });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(conn: &Connection, query: &str, ranking: &str) -> Vec<(i64, f64)> {
        conn.prepare(&format!(
            "SELECT rowid, rank FROM t WHERE t MATCH ?1{ranking} ORDER BY rank, rowid"
        ))
        .unwrap()
        .query_map([query], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
    }

    #[test]
    fn one_phrase_is_ordered_as_bm25_orders_it() {
        let conn = Connection::open_in_memory().unwrap();
        declare(&conn).unwrap();
        conn.execute_batch("CREATE VIRTUAL TABLE t USING fts5(content)")
            .unwrap();
        // Rows of many lengths with the words zero to four times, some
        // the same (ties).
        let mut insert = conn.prepare("INSERT INTO t(content) VALUES (?1)").unwrap();
        for i in 0..400_u32 {
            let mut text = String::new();
            for j in 0..(i * 7 % 23 + 1) {
                let word = match (i + j * 3) % 5 {
                    0 => "user model",
                    1 => "model",
                    2 => "user",
                    _ => "files",
                };
                text.push_str(word);
                text.push(' ');
            }
            insert.execute([text]).unwrap();
        }
        for query in ["user", "\"user model\"", "files", "mod*"] {
            let ours = ranked(&conn, query, &format!(" AND t.rank MATCH {RANK_MATCH}"));
            let theirs = ranked(&conn, query, "");
            assert!(
                ours.iter().zip(&theirs).all(|(a, b)| a.1 != b.1),
                "not bm25"
            );
            assert!(!ours.is_empty(), "{query}");
            let ids = |v: &[(i64, f64)]| v.iter().map(|r| r.0).collect::<Vec<_>>();
            assert_eq!(ids(&ours), ids(&theirs), "{query}");
            // Ties are the same rows on both sides.
            for pair in ours.windows(2).zip(theirs.windows(2)) {
                assert_eq!(
                    pair.0[0].1 == pair.0[1].1,
                    pair.1[0].1 == pair.1[1].1,
                    "{query}"
                );
            }
        }
    }
}
