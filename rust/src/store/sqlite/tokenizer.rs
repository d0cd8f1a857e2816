//! SQLite's own FTS5 tokenizers, called directly, for a backend that keeps
//! its own index of the text `state.db`'s search indexes hold (PostgreSQL):
//! the words of the word index (`unicode61` as the schema creates it) and
//! the text as the trigram index folds it. Reading text with SQLite's code,
//! not a copy of its rules, makes both backends find the same hits in every
//! script, however FTS5's Unicode tables differ from Rust's.
//!
//! Each thread keeps its own tokenizers (FTS5 tokenizer objects are not
//! shared between threads), on an in-memory connection made at first use.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

use rusqlite::{ffi, Connection};

/// The words of `text` in order, as the word index holds them (lower case,
/// diacritics taken off Latin letters); a word's position is its index.
pub fn words(text: &str) -> Vec<String> {
    with_tokenizers(|t| t.words.tokens(text))
}

/// `text` as the trigram index reads it: each character case-folded, NUL
/// characters left out. Its trigrams are the index's terms.
pub fn fold(text: &str) -> String {
    with_tokenizers(|t| t.folding.tokens(text).concat().replace('\0', ""))
}

struct Tokenizers {
    words: Tokenizer,
    /// `unicode61` with every character a token character and no diacritic
    /// removal: the whole text as one token, folded as the trigram
    /// tokenizer folds it (both call FTS5's one fold function).
    folding: Tokenizer,
    /// Owns the FTS5 module the tokenizers came from; dropped last.
    _conn: Connection,
}

thread_local! {
    static TOKENIZERS: RefCell<Option<Tokenizers>> = const { RefCell::new(None) };
}

fn with_tokenizers<T>(f: impl FnOnce(&Tokenizers) -> T) -> T {
    TOKENIZERS.with(|cell| {
        let mut slot = cell.borrow_mut();
        let tokenizers = slot.get_or_insert_with(|| {
            // The bundled SQLite is built with FTS5, and an in-memory
            // connection needs no file: a failure here is a broken build.
            Tokenizers::new().expect("the bundled SQLite's FTS5 tokenizers")
        });
        f(tokenizers)
    })
}

impl Tokenizers {
    fn new() -> Result<Self, String> {
        let conn = Connection::open_in_memory().map_err(|e| e.to_string())?;
        let api = fts5_api(&conn)?;
        let words = Tokenizer::new(api, c"unicode61", &[])?;
        let folding = Tokenizer::new(
            api,
            c"unicode61",
            &[
                c"remove_diacritics",
                c"0",
                c"categories",
                c"L* N* Co M* P* S* Z* C*",
            ],
        )?;
        Ok(Tokenizers {
            words,
            folding,
            _conn: conn,
        })
    }
}

/// The FTS5 API of `conn` (`SELECT fts5(?)` with a pointer bound, as FTS5
/// documents for reaching it).
pub(super) fn fts5_api(conn: &Connection) -> Result<*mut ffi::fts5_api, String> {
    let mut api: *mut ffi::fts5_api = ptr::null_mut();
    // SAFETY: the statement is prepared, bound, stepped and finalized on
    // `conn`'s live handle; the bound pointer is `api`, alive meanwhile.
    unsafe {
        let db = conn.handle();
        let mut stmt = ptr::null_mut();
        let rc = ffi::sqlite3_prepare_v2(
            db,
            c"SELECT fts5(?1)".as_ptr(),
            -1,
            &mut stmt,
            ptr::null_mut(),
        );
        if rc != ffi::SQLITE_OK {
            return Err(format!("FTS5 is not available (SQLite code {rc})"));
        }
        ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&mut api as *mut *mut ffi::fts5_api).cast(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        ffi::sqlite3_step(stmt);
        ffi::sqlite3_finalize(stmt);
    }
    if api.is_null() {
        return Err("FTS5 gave no API pointer".into());
    }
    Ok(api)
}

struct Tokenizer {
    methods: ffi::fts5_tokenizer,
    handle: *mut ffi::Fts5Tokenizer,
}

impl Tokenizer {
    fn new(api: *mut ffi::fts5_api, name: &CStr, args: &[&CStr]) -> Result<Self, String> {
        let mut user_data: *mut c_void = ptr::null_mut();
        let mut methods = ffi::fts5_tokenizer {
            xCreate: None,
            xDelete: None,
            xTokenize: None,
        };
        let mut handle = ptr::null_mut();
        let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        // SAFETY: `api` is the live FTS5 API of a connection the caller
        // keeps open; the name and arguments outlive the calls.
        let rc = unsafe {
            let find = (*api).xFindTokenizer.ok_or("FTS5 has no xFindTokenizer")?;
            let rc = find(api, name.as_ptr(), &mut user_data, &mut methods);
            if rc != ffi::SQLITE_OK {
                return Err(format!("FTS5 has no tokenizer {name:?} (SQLite code {rc})"));
            }
            let create = methods.xCreate.ok_or("the tokenizer has no xCreate")?;
            create(
                user_data,
                argv.as_mut_ptr(),
                argv.len() as c_int,
                &mut handle,
            )
        };
        if rc != ffi::SQLITE_OK || handle.is_null() {
            return Err(format!(
                "FTS5 refused the tokenizer {name:?} {args:?} (SQLite code {rc})"
            ));
        }
        Ok(Tokenizer { methods, handle })
    }

    fn tokens(&self, text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let Some(tokenize) = self.methods.xTokenize else {
            return out;
        };
        // Texts of 2 GiB and more do not reach here (PostgreSQL's `text` holds 1 GB).
        let len = c_int::try_from(text.len()).unwrap_or(c_int::MAX);
        // SAFETY: `handle` is this tokenizer's live object; `text` and `out`
        // outlive the call, and `collect` only appends to `out`.
        let rc = unsafe {
            tokenize(
                self.handle,
                (&mut out as *mut Vec<String>).cast(),
                ffi::FTS5_TOKENIZE_DOCUMENT,
                text.as_ptr().cast(),
                len,
                Some(collect),
            )
        };
        // Only an allocation failure stops these tokenizers.
        assert_eq!(
            rc,
            ffi::SQLITE_OK,
            "FTS5 tokenizer failed (SQLite code {rc})"
        );
        out
    }
}

unsafe extern "C" fn collect(
    out: *mut c_void,
    _flags: c_int,
    token: *const c_char,
    len: c_int,
    _start: c_int,
    _end: c_int,
) -> c_int {
    // SAFETY: `out` is the `Vec<String>` passed to `xTokenize`, and
    // `token` points to `len` bytes FTS5 owns for the call.
    let (out, bytes) = unsafe {
        (
            &mut *out.cast::<Vec<String>>(),
            std::slice::from_raw_parts(token.cast::<u8>(), len.max(0) as usize),
        )
    };
    out.push(String::from_utf8_lossy(bytes).into_owned());
    ffi::SQLITE_OK
}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        if let Some(delete) = self.methods.xDelete {
            // SAFETY: `handle` came from this tokenizer's xCreate, once.
            unsafe { delete(self.handle) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of [`samples`] with the terms and positions FTS5 itself indexed
    /// for it (`fts5vocab`) in a fresh table `USING fts5(content{options})`.
    fn indexed_samples(options: &str) -> Vec<(String, Vec<(String, i64)>)> {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE t USING fts5(content{options});
             CREATE VIRTUAL TABLE t_v USING fts5vocab(t, 'instance');"
        ))
        .unwrap();
        let texts = samples();
        for (i, text) in texts.iter().enumerate() {
            conn.execute(
                "INSERT INTO t(rowid, content) VALUES (?1, ?2)",
                rusqlite::params![i as i64, text],
            )
            .unwrap();
        }
        let mut out = vec![Vec::new(); texts.len()];
        let mut stmt = conn
            .prepare("SELECT doc, term, offset FROM t_v ORDER BY doc, offset")
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        for row in rows {
            let (doc, term, offset) = row.unwrap();
            out[doc as usize].push((term, offset));
        }
        texts.into_iter().zip(out).collect()
    }

    /// Texts with every character of the Basic Multilingual Plane but the
    /// surrogates, each between two letters and on its own, plus mixed runs.
    fn samples() -> Vec<String> {
        let mut texts: Vec<String> = (1..=0xFFFFu32)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b {c} Xy{c}{c}Z"))
            .collect();
        texts.extend([
            "Crème BRÛLÉE, naïve façade: Ærø — Œuvre".to_owned(),
            "chat-send P2.2 ada@example.com it's C# C++ TODO: fix web_search".to_owned(),
            "昨天和其他Agent的聊天记录，记忆断裂问题复现了".to_owned(),
            "\0json:[{\"type\":\"text\",\"text\":\"Ünïcödé\"}] tail".to_owned(),
            "İstanbul ΣΊΣΥΦΟΣ Straße ǅemal ﬁne Ⅻ ①".to_owned(),
        ]);
        texts
    }

    #[test]
    fn words_are_the_word_indexs_terms_at_their_positions() {
        for (text, expected) in indexed_samples("") {
            let ours: Vec<(String, i64)> = words(&text)
                .into_iter()
                .enumerate()
                .map(|(i, w)| (w, i as i64))
                .collect();
            assert_eq!(ours, expected, "{text:?}");
        }
    }

    #[test]
    fn folded_text_has_the_trigram_indexs_terms() {
        for (text, expected) in indexed_samples(", tokenize='trigram'") {
            let folded: Vec<char> = fold(&text).chars().collect();
            let ours: Vec<(String, i64)> = folded
                .windows(3)
                .enumerate()
                .map(|(i, w)| (w.iter().collect(), i as i64))
                .collect();
            assert_eq!(ours, expected, "{text:?}");
        }
    }
}
