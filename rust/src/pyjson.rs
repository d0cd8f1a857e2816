//! JSON text → Python objects in one pass, for the JSON columns of a
//! transcript (`tool_calls`, reasoning details, content parts).
//!
//! Written for loads: a string without escapes goes from the document
//! straight into a Python `str` (see `decode::utf8`);
//! escaped ones are unescaped into one reused buffer; the keys of a tool call
//! are interned. It accepts exactly RFC 8259 JSON, nested at most
//! [`MAX_DEPTH`] deep; anything else is [`Malformed`] and the caller keeps the
//! text as it is.

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
        scratch: Vec::new(),
    };
    let value = parser.value(0)?;
    parser.skip_whitespace();
    if parser.at == doc.len() {
        Ok(value)
    } else {
        Err(Malformed)
    }
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
        let rest = &self.doc[start..];
        let end = memchr::memchr2(b'"', b'\\', rest).ok_or(Malformed)?;
        if rest[end] == b'"' {
            self.at = start + end + 1;
            return if has_control(&rest[..end]) {
                Err(Malformed)
            } else {
                self.text(&rest[..end])
            };
        }
        // Escaped: unescape into the scratch buffer, one plain run at a time.
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let mut at = start;
        let result = loop {
            let Some(run) = memchr::memchr2(b'"', b'\\', &self.doc[at..]) else {
                break Err(Malformed);
            };
            if has_control(&self.doc[at..at + run]) {
                break Err(Malformed);
            }
            scratch.extend_from_slice(&self.doc[at..at + run]);
            at += run;
            if self.doc[at] == b'"' {
                self.at = at + 1;
                break self.text(&scratch);
            }
            match unescape(self.doc, at + 1, &mut scratch) {
                Some(next) => at = next,
                None => break Err(Malformed),
            }
        };
        self.scratch = scratch;
        result
    }

    /// A Python string of (unescaped) string content.
    fn text(&self, bytes: &[u8]) -> Result<Bound<'py, PyString>, Malformed> {
        let py = self.py;
        // The keys of a tool call (and its `type` value): one object each.
        let common = match bytes {
            b"id" => intern!(py, "id"),
            b"type" => intern!(py, "type"),
            b"function" => intern!(py, "function"),
            b"name" => intern!(py, "name"),
            b"arguments" => intern!(py, "arguments"),
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

/// Whether a run of raw string content holds a control character, which
/// JSON allows only escaped. (No early exit: the loop vectorizes.)
fn has_control(run: &[u8]) -> bool {
    run.iter().fold(false, |found, &b| found | (b < 0x20))
}

/// A finite float; one too large for a double is refused (as serde_json does).
fn float<'py>(py: Python<'py>, text: &str) -> Result<PyResult<Bound<'py, PyAny>>, Malformed> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x.into_bound_py_any(py)),
        _ => Err(Malformed),
    }
}

/// Appends the character escaped at `doc[at..]` (just past the backslash) to
/// `out`; returns where the string continues, or None if the escape is not JSON.
fn unescape(doc: &[u8], at: usize, out: &mut Vec<u8>) -> Option<usize> {
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
            return Some(next);
        }
        _ => return None,
    };
    out.push(simple);
    Some(at + 1)
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
