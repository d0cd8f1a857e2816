//! JSON text → Python objects in one pass, for the JSON columns of a
//! transcript (`tool_calls`, reasoning details, content parts).
//!
//! Written for loads: one SSE2 pass finds where a string ends and whether it
//! is ASCII, and a string without escapes goes from the document straight
//! into a Python `str` (see `decode::utf8`); escaped ones are unescaped into
//! a buffer reused across documents; the keys of a tool call are interned.
//! It accepts exactly RFC 8259 JSON, nested at most [`MAX_DEPTH`] deep;
//! anything else is [`Malformed`] and the caller keeps the text as it is.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use pyo3::{intern, IntoPyObjectExt};

use crate::decode;

/// Arrays and objects nested more than this deep are refused (serde_json's
/// limit too), so a hostile row cannot exhaust the stack.
const MAX_DEPTH: usize = 128;

/// The document is not JSON (or nests too deep); nothing was raised in Python.
#[derive(Debug)]
pub struct Malformed;

/// Parses `doc`, which must hold exactly one JSON value (and whitespace).
pub fn parse<'py>(py: Python<'py>, doc: &[u8]) -> Result<Bound<'py, PyAny>, Malformed> {
    let mut parser = Parser {
        py,
        doc,
        at: 0,
        scratch: SCRATCH.take(),
    };
    let value = parser.value(0);
    parser.skip_whitespace();
    let whole = parser.at == doc.len();
    SCRATCH.set(std::mem::take(&mut parser.scratch));
    match value {
        Ok(value) if whole => Ok(value),
        _ => Err(Malformed),
    }
}

thread_local! {
    /// The unescaping buffer, kept from one document to the next: a load
    /// parses one per tool-calling message.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

struct Parser<'py, 'a> {
    py: Python<'py>,
    doc: &'a [u8],
    at: usize,
    /// Unescaped string bytes, reused from one escaped string to the next.
    scratch: Vec<u8>,
}

impl<'py> Parser<'py, '_> {
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.doc.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.doc.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), Malformed> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(Malformed)
        }
    }

    fn value(&mut self, depth: usize) -> Result<Bound<'py, PyAny>, Malformed> {
        if depth >= MAX_DEPTH {
            return Err(Malformed);
        }
        let py = self.py;
        match self.peek().ok_or(Malformed)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => Ok(self.string()?.into_any()),
            b't' => self.literal(b"true", || true.into_bound_py_any(py)),
            b'f' => self.literal(b"false", || false.into_bound_py_any(py)),
            b'n' => self.literal(b"null", || Ok(py.None().into_bound(py))),
            _ => self.number(),
        }
    }

    fn literal(
        &mut self,
        word: &[u8],
        make: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
    ) -> Result<Bound<'py, PyAny>, Malformed> {
        if !self.doc[self.at..].starts_with(word) {
            return Err(Malformed);
        }
        self.at += word.len();
        make().map_err(|_| Malformed)
    }

    fn object(&mut self, depth: usize) -> Result<Bound<'py, PyAny>, Malformed> {
        self.at += 1; // '{'
        let dict = PyDict::new(self.py);
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(dict.into_any());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(Malformed);
            }
            let key = self.string()?;
            self.expect(b':')?;
            let value = self.value(depth + 1)?;
            dict.set_item(key, value).map_err(|_| Malformed)?;
            if self.closed_after_item(b'}')? {
                return Ok(dict.into_any());
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Bound<'py, PyAny>, Malformed> {
        self.at += 1; // '['
        let list = PyList::empty(self.py);
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(list.into_any());
        }
        loop {
            let item = self.value(depth + 1)?;
            list.append(item).map_err(|_| Malformed)?;
            if self.closed_after_item(b']')? {
                return Ok(list.into_any());
            }
        }
    }

    /// After an item of an array or object: true at its `close`, false past
    /// a comma (another item follows).
    fn closed_after_item(&mut self, close: u8) -> Result<bool, Malformed> {
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                Ok(false)
            }
            Some(b) if b == close => {
                self.at += 1;
                Ok(true)
            }
            _ => Err(Malformed),
        }
    }

    /// A string at `self.at` (its opening quote).
    fn string(&mut self) -> Result<Bound<'py, PyString>, Malformed> {
        let start = self.at + 1;
        let run = plain_run(&self.doc[start..]);
        let at = start + run.len;
        match self.doc.get(at) {
            Some(b'"') => {
                self.at = at + 1;
                return self.text(&self.doc[start..at], run.ascii);
            }
            Some(b'\\') => {}
            _ => return Err(Malformed), // a control character, or no closing quote
        }
        // Escaped: unescaped into the scratch buffer, kept across strings.
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(&self.doc[start..at]);
        let result = match unescape_rest(self.doc, at, &mut scratch) {
            Some((end, ascii)) => {
                self.at = end + 1;
                self.text(&scratch, run.ascii && ascii)
            }
            None => Err(Malformed),
        };
        self.scratch = scratch;
        result
    }

    /// A Python string of (unescaped) string content; `ascii` if it is known
    /// to be ASCII.
    fn text(&self, bytes: &[u8], ascii: bool) -> Result<Bound<'py, PyString>, Malformed> {
        let py = self.py;
        // The keys of a tool call (and its `type` value): one object each.
        let common = match bytes {
            b"id" => intern!(py, "id"),
            b"type" => intern!(py, "type"),
            b"function" => intern!(py, "function"),
            b"name" => intern!(py, "name"),
            b"arguments" => intern!(py, "arguments"),
            _ if ascii => return decode::ascii(py, bytes).map_err(|_| Malformed),
            // Invalid UTF-8 is malformed JSON (its Python error is dropped).
            _ => return decode::utf8(py, bytes, c"strict").map_err(|_| Malformed),
        };
        Ok(common.clone())
    }

    fn number(&mut self) -> Result<Bound<'py, PyAny>, Malformed> {
        let start = self.at;
        let digits = |doc: &[u8], mut at: usize| {
            let from = at;
            while doc.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            (at > from).then_some(at)
        };
        let mut at = start;
        if self.doc.get(at) == Some(&b'-') {
            at += 1;
        }
        // No leading zeros: "0" alone, or a non-zero digit first.
        at = match self.doc.get(at) {
            Some(b'0') => at + 1,
            Some(b'1'..=b'9') => digits(self.doc, at).ok_or(Malformed)?,
            _ => return Err(Malformed),
        };
        let mut integral = true;
        if self.doc.get(at) == Some(&b'.') {
            integral = false;
            at = digits(self.doc, at + 1).ok_or(Malformed)?;
        }
        if let Some(b'e' | b'E') = self.doc.get(at) {
            integral = false;
            at += 1;
            if let Some(b'+' | b'-') = self.doc.get(at) {
                at += 1;
            }
            at = digits(self.doc, at).ok_or(Malformed)?;
        }
        self.at = at;
        // The grammar above admits only ASCII.
        let text = std::str::from_utf8(&self.doc[start..at]).map_err(|_| Malformed)?;
        let py = self.py;
        let made = if integral {
            match (text.parse::<i64>(), text.parse::<u64>()) {
                (Ok(n), _) => n.into_bound_py_any(py),
                (_, Ok(n)) => n.into_bound_py_any(py),
                _ => float(py, text)?,
            }
        } else {
            float(py, text)?
        };
        made.map_err(|_| Malformed)
    }
}

/// The plain content at the start of a string's remainder `s`.
struct Run {
    /// Bytes before the first `"`, `\\` or control character (all of `s`
    /// if there is none).
    len: usize,
    /// Whether those bytes are all ASCII.
    ascii: bool,
}

/// Scans `s` for the end of its plain run: 16 bytes a step with SSE2 (part
/// of every x86_64), noting non-ASCII bytes on the way; byte by byte
/// elsewhere and for the tail.
fn plain_run(s: &[u8]) -> Run {
    let mut at = 0;
    let mut high = 0u8;
    #[cfg(target_arch = "x86_64")]
    {
        let mut high_bits = 0;
        while at + 16 <= s.len() {
            // SAFETY: the 16 bytes lie inside `s`.
            let v = unsafe { sse2::load(s, at) };
            let (stops, highs) = sse2::stops_and_highs(v);
            if stops != 0 {
                let len = stops.trailing_zeros();
                let before = highs & ((1 << len) - 1);
                return Run {
                    len: at + len as usize,
                    ascii: (high_bits | before) == 0,
                };
            }
            high_bits |= highs;
            at += 16;
        }
        if high_bits != 0 {
            high = 0x80;
        }
    }
    for &b in &s[at..] {
        if is_stop(b) {
            break;
        }
        high |= b;
        at += 1;
    }
    Run {
        len: at,
        ascii: high < 0x80,
    }
}

/// Whether `b` ends a plain run: a quote, a backslash or a control character.
fn is_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Unescapes the rest of a string, from the backslash at `doc[at]` to the
/// closing quote, onto `out`. Returns where the quote is and whether what
/// was appended is ASCII; None if the string is not JSON.
///
/// One loop, no call per escape: a tool call's `arguments` is JSON inside
/// JSON, with an escape every few words. Plain runs are copied 16 bytes a
/// step as they are scanned; a step may store bytes past its run, which the
/// next write overwrites. No escape is shorter than what it stands for, so
/// room for the rest of the document is room for every step.
fn unescape_rest(doc: &[u8], mut at: usize, out: &mut Vec<u8>) -> Option<(usize, bool)> {
    out.reserve(doc.len() - at);
    let mut high = 0u8;
    loop {
        // `at` is on a backslash.
        let (next, ascii) = unescape(doc, at + 1, out)?;
        at = next;
        if !ascii {
            high = 0x80;
        }
        #[cfg(target_arch = "x86_64")]
        while at + 16 <= doc.len() {
            // SAFETY: the 16 bytes read lie inside `doc`. Since `out` had room
            // for all of `doc` from the first backslash on, and has grown by
            // no more than was read since, the 16 bytes stored fit in it;
            // only the run's bytes are counted in.
            let stops = unsafe {
                let v = sse2::load(doc, at);
                sse2::store(out.as_mut_ptr().add(out.len()), v);
                let (stops, highs) = sse2::stops_and_highs(v);
                let len = if stops == 0 {
                    16
                } else {
                    stops.trailing_zeros()
                };
                if highs & ((1u64 << len) - 1) as i32 != 0 {
                    high = 0x80;
                }
                out.set_len(out.len() + len as usize);
                at += len as usize;
                stops
            };
            if stops != 0 {
                break;
            }
        }
        while let Some(&b) = doc.get(at).filter(|&&b| !is_stop(b)) {
            high |= b;
            out.push(b);
            at += 1;
        }
        match doc.get(at)? {
            b'"' => return Some((at, high < 0x80)),
            b'\\' => {}
            _ => return None,
        }
    }
}

/// The 16-byte steps of the string scans.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    /// # Safety
    /// `s[at..at + 16]` exists.
    #[inline(always)]
    pub unsafe fn load(s: &[u8], at: usize) -> __m128i {
        _mm_loadu_si128(s.as_ptr().add(at).cast())
    }

    /// # Safety
    /// `to` has room for 16 bytes.
    #[inline(always)]
    pub unsafe fn store(to: *mut u8, v: __m128i) {
        _mm_storeu_si128(to.cast(), v)
    }

    /// Bit masks of the bytes of `v` that end a plain run, and of those that
    /// are not ASCII. (SSE2 is part of every x86_64.)
    #[inline(always)]
    pub fn stops_and_highs(v: __m128i) -> (i32, i32) {
        // SAFETY: SSE2 is always present on x86_64.
        unsafe {
            let special = _mm_or_si128(
                _mm_or_si128(
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)),
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
                ),
                // b <= 0x1f, unsigned: min(b, 0x1f) == b
                _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v),
            );
            (_mm_movemask_epi8(special), _mm_movemask_epi8(v))
        }
    }
}

/// A finite float; one too large for a double is refused (as serde_json does).
fn float<'py>(py: Python<'py>, text: &str) -> Result<PyResult<Bound<'py, PyAny>>, Malformed> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x.into_bound_py_any(py)),
        _ => Err(Malformed),
    }
}

/// Appends the character escaped at `doc[at..]` (just past the backslash) to
/// `out`; returns where the string continues and whether the character is
/// ASCII, or None if the escape is not JSON.
fn unescape(doc: &[u8], at: usize, out: &mut Vec<u8>) -> Option<(usize, bool)> {
    let simple = match *doc.get(at)? {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'u' => {
            let (c, next) = code_point(doc, at + 1)?;
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            return Some((next, c.is_ascii()));
        }
        _ => return None,
    };
    out.push(simple);
    Some((at + 1, true))
}

/// The character of a `\uXXXX` escape whose hex digits start at `at`,
/// joining a surrogate pair; a lone surrogate is not a character (refused).
fn code_point(doc: &[u8], at: usize) -> Option<(char, usize)> {
    let unit = hex4(doc, at)?;
    match unit {
        0xD800..=0xDBFF => {
            if doc.get(at + 4..at + 6)? != b"\\u" {
                return None;
            }
            let low = hex4(doc, at + 6)?;
            if !(0xDC00..=0xDFFF).contains(&low) {
                return None;
            }
            let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            Some((char::from_u32(c)?, at + 10))
        }
        _ => Some((char::from_u32(unit)?, at + 4)),
    }
}

fn hex4(doc: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(doc.get(at..at + 4)?).ok()?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `plain_run` by definition, a byte at a time.
    fn expected(s: &[u8]) -> (usize, bool) {
        let len = s
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
            .unwrap_or(s.len());
        (len, s[..len].is_ascii())
    }

    #[test]
    fn plain_run_stops_where_a_bytewise_scan_does() {
        // Every stop byte and a non-ASCII byte at every position, on both
        // sides of the 16-byte steps and of the tail.
        for size in 0usize..50 {
            for stop in [b'"', b'\\', 0x00, 0x1f, b' '] {
                for stop_at in 0..=size {
                    // A non-ASCII byte before the stop, or just after it
                    // (which must not count).
                    let highs = [
                        0,
                        stop_at.wrapping_sub(1),
                        stop_at + 1,
                        size.wrapping_sub(1),
                    ];
                    for high_at in highs.map(Some).into_iter().chain([None]) {
                        let mut s = vec![b'a'; size + 1];
                        s[stop_at] = stop;
                        if let Some(h) = high_at.filter(|&h| h < size && h != stop_at) {
                            s[h] = 0xc3;
                        }
                        let s = &s[..size];
                        let run = plain_run(s);
                        assert_eq!((run.len, run.ascii), expected(s), "{s:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn escaped_strings_unescape_across_the_16_byte_steps() {
        // (escaped, meaning) pieces, joined with plain runs of every length
        // around the steps, ASCII or not.
        let escapes: [(&str, &str); 5] = [
            ("\\\"", "\""),
            ("\\n", "\n"),
            ("\\u00e9", "\u{e9}"),
            ("\\ud83d\\ude80", "\u{1f680}"),
            ("\\\\", "\\"),
        ];
        for plain_len in 0..40 {
            for plain in ["a".repeat(plain_len), "\u{e9}".repeat(plain_len / 2)] {
                for (escape, meaning) in escapes {
                    let body = format!("{escape}{plain}{escape}{plain}");
                    let doc = format!("{body}\" tail");
                    let mut out = b"kept".to_vec();
                    let (end, ascii) = unescape_rest(doc.as_bytes(), 0, &mut out).unwrap();
                    let expected = format!("kept{meaning}{plain}{meaning}{plain}");
                    assert_eq!(String::from_utf8(out).unwrap(), expected, "{doc:?}");
                    assert_eq!(end, body.len(), "{doc:?}");
                    assert_eq!(ascii, expected.is_ascii(), "{doc:?}");
                }
            }
        }
        // Not JSON: a bad escape, a control character, no closing quote.
        for doc in ["\\x\"", "\\n\u{1}\"", "\\n abc"] {
            assert_eq!(
                unescape_rest(doc.as_bytes(), 0, &mut Vec::new()),
                None,
                "{doc:?}"
            );
        }
    }
}
