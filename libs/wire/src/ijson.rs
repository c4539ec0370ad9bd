//! A strict JSON parser that accepts only I-JSON (RFC 7493): what RFC 8785 can canonicalize faithfully.
//!
//! serde_json keeps the last of duplicate keys, reads big integer literals as rounded doubles and
//! parses floats with a fast, not always correctly rounded, algorithm; each of those would make the
//! ledger's canonical bytes say something the producer did not. So inbound JSON goes through this
//! small recursive-descent parser instead, in one pass, and every refusal names its problem and its
//! JSON Pointer:
//!
//! - duplicate object keys (compared after unescaping);
//! - integer literals (no fraction, no exponent) beyond ±(2^53−1);
//! - numbers whose magnitude overflows a double (`1e400`); non-integers such as `1E30` are fine;
//! - invalid UTF-8 inside strings, and lone surrogate escapes (`"\ud800"`);
//! - and, not I-JSON problems but still refusals: syntax errors and nesting deeper than
//!   [`MAX_DEPTH`] (the parser recurses, and a stack overflow must not be reachable from the wire).
//!
//! Floats are read with Rust's `str::parse::<f64>`, which rounds correctly.
//!
//! [`parse_checked_canonical`] is the same pass with one more check per token: that the text is
//! exactly what RFC 8785 writes for the value it parses to (no whitespace, members in UTF-16 order,
//! the shortest escapes, numbers in their ECMAScript form). It is how a stored ledger entry is proved
//! canonical: one validating scan, used by `LedgerEntry::parse_canonical` and by `verify`.
//! `LedgerEntry::scan_canonical` runs the scan that builds nothing, keeping the entry's outline as it
//! goes (`EntryOutline`) so that reading the entry takes no second pass.

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Number, Value};

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 128;

/// The largest integer magnitude I-JSON allows: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Longest literal or key quoted back in an error.
const QUOTE_LIMIT: usize = 48;

/// What is wrong with a JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonProblem {
    /// Not JSON at all.
    Syntax {
        /// Byte offset of the problem.
        offset: usize,
        /// What was expected or found.
        message: String,
    },
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// An object has the same key twice.
    DuplicateKey {
        /// The key (shortened when long).
        key: String,
    },
    /// An integer literal beyond ±(2^53−1).
    IntegerOutOfRange {
        /// The literal (shortened when long).
        literal: String,
    },
    /// A number whose magnitude overflows a double.
    NumberOverflow {
        /// The literal (shortened when long).
        literal: String,
    },
    /// A `\uD800`–`\uDFFF` escape without its pair.
    LoneSurrogate {
        /// The unpaired UTF-16 code unit.
        code_unit: u16,
    },
    /// Bytes in a string that are not UTF-8.
    InvalidUtf8 {
        /// Byte offset of the first bad byte.
        offset: usize,
    },
    /// Valid JSON, but not the RFC 8785 form of the value it holds (only [`parse_checked_canonical`]
    /// reports this).
    NotCanonical {
        /// Byte offset of the first byte that differs from the canonical form.
        offset: usize,
        /// What the canonical form has there instead.
        expected: &'static str,
    },
}

impl JsonProblem {
    /// True for the problems RFC 7493 names (the input is JSON, but not I-JSON); false for syntax
    /// errors and excessive nesting.
    pub fn is_ijson_violation(&self) -> bool {
        !matches!(self, Self::Syntax { .. } | Self::TooDeep)
    }
}

impl fmt::Display for JsonProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax { offset, message } => write!(f, "invalid JSON at byte {offset}: {message}"),
            Self::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels"),
            Self::DuplicateKey { key } => write!(f, "duplicate key {key:?}"),
            Self::IntegerOutOfRange { literal } => {
                write!(f, "integer {literal} is beyond ±(2^53−1)")
            }
            Self::NumberOverflow { literal } => write!(f, "number {literal} overflows a double"),
            Self::LoneSurrogate { code_unit } => write!(f, "lone surrogate \\u{code_unit:04x}"),
            Self::InvalidUtf8 { offset } => write!(f, "invalid UTF-8 at byte {offset}"),
            Self::NotCanonical { offset, expected } => {
                write!(f, "not RFC 8785 canonical at byte {offset}: expected {expected}")
            }
        }
    }
}

/// A refused JSON text: the problem and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// What is wrong.
    pub problem: JsonProblem,
    /// JSON Pointer (RFC 6901) to the value where it is; empty for the root.
    pub path: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at `{}`", self.problem, self.path)
    }
}

impl std::error::Error for JsonError {}

impl JsonError {
    /// The same error with `prefix` (a JSON Pointer) put before its path.
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = format!("{prefix}{}", self.path);
        self
    }
}

impl From<JsonError> for crate::Error {
    /// I-JSON violations become `not_ijson`; syntax and nesting become `bad_envelope` naming the path.
    fn from(error: JsonError) -> Self {
        if error.problem.is_ijson_violation() {
            crate::Error::NotIJson {
                problem: error.problem,
                path: error.path,
            }
        } else {
            let attribute = if error.path.is_empty() {
                "body".to_owned()
            } else {
                error.path
            };
            crate::Error::bad_envelope(attribute, error.problem.to_string())
        }
    }
}

/// Parses `bytes` as one I-JSON text: what every inbound message goes through.
pub fn parse(bytes: &[u8]) -> Result<Value, JsonError> {
    parse_with(bytes, false, false, true)
}

/// Parses JSON that RFC 8785 wrote, such as a stored ledger entry. JCS writes every number as a
/// double, and a double of magnitude 2^53 or more with no fraction comes out as an integer literal
/// (`1e20` is written `100000000000000000000`); here such literals are read back as the doubles they
/// are. Every other check of [`parse`] applies.
pub fn parse_canonical(bytes: &[u8]) -> Result<Value, JsonError> {
    parse_with(bytes, true, false, true)
}

/// [`parse_canonical`] that also proves the bytes are the RFC 8785 form of the value: anything else
/// (whitespace, members out of order, a longer escape, `1.0` for `1`) is [`JsonProblem::NotCanonical`]
/// at the first byte that differs. One pass: the check rides on the parse.
pub fn parse_checked_canonical(bytes: &[u8]) -> Result<Value, JsonError> {
    parse_with(bytes, true, true, true)
}

/// The checks of [`parse_checked_canonical`] without building the value: a validating scan that
/// allocates only for escaped strings, for readers that need to know the bytes are a canonical
/// I-JSON text but not what they hold (verify). The same bytes pass or fail with the same error.
pub fn scan_checked_canonical(bytes: &[u8]) -> Result<(), JsonError> {
    parse_with(bytes, true, true, false).map(drop)
}

/// [`scan_checked_canonical`] of a ledger entry, keeping its outline on the way: the same bytes
/// pass or fail with the same error.
pub(crate) fn scan_checked_canonical_entry(bytes: &[u8]) -> Result<EntryOutline<'_>, JsonError> {
    let mut parser = Parser::new(bytes, true, true, false);
    parser.outline = Some(EntryOutline::default());
    parser.document()?;
    Ok(parser.outline.unwrap_or_default())
}

fn parse_with(
    bytes: &[u8],
    big_integers_are_doubles: bool,
    canonical: bool,
    build: bool,
) -> Result<Value, JsonError> {
    Parser::new(bytes, big_integers_are_doubles, canonical, build).document()
}

/// The event attributes an [`EntryOutline`] keeps, in the order of its `attributes`.
pub(crate) const OUTLINE_ATTRIBUTES: [&str; 5] = ["specversion", "id", "source", "type", "tenant"];

/// What a scan keeps of a ledger entry (`{"event":{…},"ledger":{…}}`) for
/// `LedgerEntry::scan_canonical`: the values of the top-level `event` and `ledger` members, and of
/// the [`OUTLINE_ATTRIBUTES`] among the members of that `event`. Members of the same names anywhere
/// else (inside `data`, inside `ledger`) are not the entry's and are not kept.
#[derive(Debug, Default)]
pub(crate) struct EntryOutline<'a> {
    /// The bytes of the top-level `event` member's value.
    pub(crate) event: Option<&'a [u8]>,
    /// The bytes of the top-level `ledger` member's value.
    pub(crate) ledger: Option<&'a [u8]>,
    /// The event's `specversion`, `id`, `source`, `type` and `tenant`, where it has them.
    pub(crate) attributes: [Option<Member<'a>>; 5],
}

/// A member's value as an [`EntryOutline`] keeps it.
#[derive(Debug, PartialEq)]
pub(crate) enum Member<'a> {
    /// A string, borrowed from the bytes unless it has escapes.
    Text(Cow<'a, str>),
    /// Any other value, as its bytes.
    Other(&'a [u8]),
}

/// Where in the [`EntryOutline`] a member's value goes.
#[derive(Clone, Copy)]
enum OutlineSlot {
    Event,
    Ledger,
    /// The index into [`OUTLINE_ATTRIBUTES`].
    Attribute(usize),
}

/// One step of a JSON Pointer.
enum Segment<'a> {
    Key(Cow<'a, str>),
    Index(usize),
}

/// Renders path segments as a JSON Pointer.
fn pointer(path: &[Segment<'_>]) -> String {
    let mut out = String::new();
    for segment in path {
        out.push('/');
        match segment {
            Segment::Key(key) => out.push_str(&key.replace('~', "~0").replace('/', "~1")),
            Segment::Index(index) => out.push_str(&index.to_string()),
        }
    }
    out
}

/// Whether `next` sorts after `last` by UTF-16 code units, as RFC 8785 orders members. Keys that
/// first differ at an ASCII byte on both sides (nearly all of them) compare as bytes: what comes
/// before is the same whole characters, and an ASCII character is one code unit in either encoding.
fn utf16_ascending(last: &str, next: &str) -> bool {
    let (a, b) = (last.as_bytes(), next.as_bytes());
    match a.iter().zip(b).position(|(x, y)| x != y) {
        // One is a prefix of the other (at a character boundary): the longer sorts after.
        None => b.len() > a.len(),
        Some(i) if a[i].is_ascii() && b[i].is_ascii() => b[i] > a[i],
        Some(_) => next.encode_utf16().cmp(last.encode_utf16()).is_gt(),
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    /// The bytes as text when they are UTF-8 as a whole (validated once, the common case); else the
    /// strings' runs are validated one by one, which finds the first bad byte.
    text: Option<&'a str>,
    pos: usize,
    path: Vec<Segment<'a>>,
    big_integers_are_doubles: bool,
    /// Refuse what RFC 8785 would not have written.
    canonical: bool,
    /// Build the value; a scan (false) checks every value and builds none.
    build: bool,
    /// Where a scan of a ledger entry keeps the entry's outline; `None` for every other parse.
    outline: Option<EntryOutline<'a>>,
}

impl<'a> Parser<'a> {
    fn new(bytes: &'a [u8], big_integers_are_doubles: bool, canonical: bool, build: bool) -> Self {
        Parser {
            bytes,
            text: std::str::from_utf8(bytes).ok(),
            pos: 0,
            path: Vec::new(),
            big_integers_are_doubles,
            canonical,
            build,
            outline: None,
        }
    }

    /// The whole text: one value, whitespace around it when allowed, nothing after it.
    fn document(&mut self) -> Result<Value, JsonError> {
        self.skip_ws_checked()?;
        let value = self.value(0)?;
        self.skip_ws_checked()?;
        if self.pos != self.bytes.len() {
            return Err(self.syntax("trailing characters after the value"));
        }
        Ok(value)
    }

    fn fail(&self, problem: JsonProblem) -> JsonError {
        JsonError {
            problem,
            path: pointer(&self.path),
        }
    }

    fn syntax(&self, message: &str) -> JsonError {
        let found = match self.bytes.get(self.pos) {
            Some(b) if b.is_ascii_graphic() => format!(", found `{}`", char::from(*b)),
            Some(b) => format!(", found byte 0x{b:02x}"),
            None => ", found the end".to_owned(),
        };
        self.fail(JsonProblem::Syntax {
            offset: self.pos,
            message: format!("{message}{found}"),
        })
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Whitespace, unless the text must be canonical (which has none).
    fn skip_ws_checked(&mut self) -> Result<(), JsonError> {
        if self.canonical && matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            return Err(self.not_canonical(self.pos, "no whitespace"));
        }
        self.skip_ws();
        Ok(())
    }

    fn not_canonical(&self, offset: usize, expected: &'static str) -> JsonError {
        self.fail(JsonProblem::NotCanonical { offset, expected })
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Result<Value, JsonError> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.syntax("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') if self.build => self.string().map(|s| Value::String(s.into_owned())),
            Some(b'"') => self.string().map(|_| Value::Null),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.syntax("expected a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.fail(JsonProblem::TooDeep));
        }
        self.pos += 1;
        let mut map = Map::new();
        // The key before, in document order, when checking canonical form.
        let mut previous: Option<Cow<'a, str>> = None;
        self.skip_ws_checked()?;
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws_checked()?;
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a string key"));
            }
            let key_at = self.pos;
            let key = self.string()?;
            if self.canonical {
                if previous
                    .as_deref()
                    .is_some_and(|last| !utf16_ascending(last, &key))
                {
                    return Err(self.not_canonical(key_at, "members sorted by UTF-16 code units"));
                }
                previous = Some(key.clone());
            }
            self.skip_ws_checked()?;
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected `:`"));
            }
            self.pos += 1;
            self.skip_ws_checked()?;
            // A scan checks canonical form only, where a repeated key is out of order above.
            if self.build && map.contains_key(key.as_ref()) {
                self.path.push(Segment::Key(key.clone()));
                let error = self.fail(JsonProblem::DuplicateKey { key: shorten(&key) });
                return Err(error);
            }
            self.path.push(Segment::Key(key));
            let value = self.member_value(depth)?;
            let key = match self.path.pop() {
                Some(Segment::Key(key)) => key,
                // The key pushed above comes back; refuse rather than panic should that ever change.
                _ => return Err(self.syntax("internal error: path out of step")),
            };
            if self.build {
                map.insert(key.into_owned(), value);
            }
            self.skip_ws_checked()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.syntax("expected `,` or `}`")),
            }
        }
    }

    /// The value of the member the path ends in, kept in the outline when it is one the outline wants.
    fn member_value(&mut self, depth: usize) -> Result<Value, JsonError> {
        let Some(slot) = self.outline_slot() else {
            return self.value(depth);
        };
        let start = self.pos;
        if let OutlineSlot::Attribute(index) = slot
            && self.peek() == Some(b'"')
        {
            let text = self.string()?;
            if let Some(outline) = &mut self.outline {
                outline.attributes[index] = Some(Member::Text(text));
            }
            // Only a scan keeps an outline, and a scan builds no value.
            return Ok(Value::Null);
        }
        let value = self.value(depth)?;
        let bytes = &self.bytes[start..self.pos];
        if let Some(outline) = &mut self.outline {
            match slot {
                OutlineSlot::Event => outline.event = Some(bytes),
                OutlineSlot::Ledger => outline.ledger = Some(bytes),
                OutlineSlot::Attribute(index) => outline.attributes[index] = Some(Member::Other(bytes)),
            }
        }
        Ok(value)
    }

    /// Where the member the path ends in goes in the outline: a top-level `event` or `ledger`, or an
    /// attribute of that `event`. `None` when no outline is kept.
    fn outline_slot(&self) -> Option<OutlineSlot> {
        self.outline.as_ref()?;
        match self.path.as_slice() {
            [Segment::Key(name)] if name == "event" => Some(OutlineSlot::Event),
            [Segment::Key(name)] if name == "ledger" => Some(OutlineSlot::Ledger),
            [Segment::Key(event), Segment::Key(name)] if event == "event" => OUTLINE_ATTRIBUTES
                .iter()
                .position(|attribute| *attribute == name.as_ref())
                .map(OutlineSlot::Attribute),
            _ => None,
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.fail(JsonProblem::TooDeep));
        }
        self.pos += 1;
        let mut items = Vec::new();
        let mut index = 0;
        self.skip_ws_checked()?;
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws_checked()?;
            self.path.push(Segment::Index(index));
            let value = self.value(depth)?;
            self.path.pop();
            if self.build {
                items.push(value);
            }
            self.skip_ws_checked()?;
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    index += 1;
                }
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax("expected `,` or `]`")),
            }
        }
    }

    /// A string starting at the opening quote: borrowed from the bytes unless it has escapes.
    fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        self.pos += 1;
        let bytes = self.bytes;
        let mut out = String::new();
        loop {
            // Copy the longest run of plain bytes at once, validating it as UTF-8.
            let start = self.pos;
            self.pos += crate::jcs::plain_run(&bytes[start..]);
            // A run starts and ends at an ASCII byte (or the end), so in text that is UTF-8 as a
            // whole it is a slice of that text, with nothing left to check.
            let run = match self.text.and_then(|text| text.get(start..self.pos)) {
                Some(run) => Ok(run),
                None => std::str::from_utf8(&bytes[start..self.pos]),
            };
            match run {
                // No escape: the text as it stands in the bytes.
                Ok(text) if out.is_empty() && self.peek() == Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Borrowed(text));
                }
                Ok(text) => out.push_str(text),
                Err(e) => {
                    return Err(self.fail(JsonProblem::InvalidUtf8 {
                        offset: start + e.valid_up_to(),
                    }));
                }
            }
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    let at = self.pos;
                    self.pos += 1;
                    self.escape(&mut out)?;
                    if self.canonical {
                        self.check_escape(at, out.chars().next_back())?;
                    }
                }
                Some(_) => return Err(self.syntax("unescaped control character in a string")),
                None => return Err(self.syntax("unterminated string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let Some(b) = self.peek() else {
            return Err(self.syntax("unterminated escape"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        if self.bytes[self.pos..].starts_with(b"\\u") {
                            let save = self.pos;
                            self.pos += 2;
                            let low = self.hex4()?;
                            if (0xDC00..=0xDFFF).contains(&low) {
                                let code =
                                    0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                                char::from_u32(code).ok_or_else(|| self.syntax("bad surrogate pair"))?
                            } else {
                                self.pos = save;
                                return Err(self.fail(JsonProblem::LoneSurrogate { code_unit: unit }));
                            }
                        } else {
                            return Err(self.fail(JsonProblem::LoneSurrogate { code_unit: unit }));
                        }
                    }
                    0xDC00..=0xDFFF => return Err(self.fail(JsonProblem::LoneSurrogate { code_unit: unit })),
                    _ => char::from_u32(u32::from(unit)).ok_or_else(|| self.syntax("bad escape"))?,
                }
            }
            _ => {
                self.pos -= 1;
                return Err(self.syntax("invalid escape"));
            }
        };
        out.push(c);
        Ok(())
    }

    /// The escape at `at` (just read, giving `c`) is the one RFC 8785 writes for `c`: the two-character
    /// forms for `"`, `\\`, backspace, form feed, newline, carriage return and tab, `\u00xx` (lowercase)
    /// for the other controls, and no escape at all for anything else.
    fn check_escape(&self, at: usize, c: Option<char>) -> Result<(), JsonError> {
        let written = &self.bytes[at..self.pos];
        let canonical: &[u8] = match c {
            Some('"') => b"\\\"",
            Some('\\') => b"\\\\",
            Some('\u{8}') => b"\\b",
            Some('\u{c}') => b"\\f",
            Some('\n') => b"\\n",
            Some('\r') => b"\\r",
            Some('\t') => b"\\t",
            Some(c) if u32::from(c) < 0x20 => {
                let mut buf = *b"\\u00xx";
                let hex = b"0123456789abcdef";
                let code = u32::from(c) as usize;
                buf[4] = hex[code >> 4];
                buf[5] = hex[code & 0xf];
                return if written == buf {
                    Ok(())
                } else {
                    Err(self.not_canonical(at, "a lowercase \\u00xx escape"))
                };
            }
            _ => return Err(self.not_canonical(at, "the character itself, unescaped")),
        };
        if written == canonical {
            Ok(())
        } else {
            Err(self.not_canonical(at, "the two-character escape"))
        }
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.syntax("short \\u escape"))?;
        let mut unit: u16 = 0;
        for d in digits {
            let v = (*d as char)
                .to_digit(16)
                .ok_or_else(|| self.syntax("bad hex digit in \\u escape"))?;
            unit = unit * 16 + v as u16;
        }
        self.pos += 4;
        Ok(unit)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// The number literal at `start` is what RFC 8785 writes for its double: ECMAScript's
    /// `Number.prototype.toString` (both zeros are `0`).
    fn check_number(&self, start: usize, literal: &str) -> Result<(), JsonError> {
        let float: f64 = literal.parse().map_err(|_| self.syntax("number literal"))?;
        let holds = if !float.is_finite() {
            true // refused as an overflow by the parse itself
        } else if float == 0.0 {
            literal == "0"
        } else {
            ryu_js::Buffer::new().format_finite(float) == literal
        };
        if holds {
            Ok(())
        } else {
            Err(self.not_canonical(start, "the number in its ECMAScript form"))
        }
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.digits() {
            0 => return Err(self.syntax("expected a digit")),
            n if n > 1 && self.bytes[int_start] == b'0' => {
                self.pos = int_start + 1;
                return Err(self.syntax("leading zero in a number"));
            }
            _ => {}
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.syntax("expected a digit after `.`"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            integer = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax("expected a digit in the exponent"));
            }
        }
        // The number grammar above admits ASCII only, so this cannot fail; map it anyway rather than panic.
        let literal = std::str::from_utf8(&self.bytes[start..self.pos])
            .map_err(|_| self.syntax("number is not ASCII"))?;
        if self.canonical {
            self.check_number(start, literal)?;
        }
        if integer {
            let magnitude = &literal[usize::from(negative)..];
            let within =
                magnitude.len() <= 16 && magnitude.parse::<u64>().is_ok_and(|m| m <= MAX_SAFE_INTEGER);
            if !within && !self.big_integers_are_doubles {
                return Err(self.fail(JsonProblem::IntegerOutOfRange {
                    literal: shorten(literal),
                }));
            }
            if within {
                let number = match literal.parse::<i64>() {
                    Ok(n) => Number::from(n),
                    Err(_) => return Err(self.syntax("integer literal")),
                };
                return Ok(Value::Number(number));
            }
        }
        let float: f64 = literal.parse().map_err(|_| self.syntax("number literal"))?;
        if !float.is_finite() {
            return Err(self.fail(JsonProblem::NumberOverflow {
                literal: shorten(literal),
            }));
        }
        Number::from_f64(float).map(Value::Number).ok_or_else(|| {
            self.fail(JsonProblem::NumberOverflow {
                literal: shorten(literal),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_canonical(text: &str) -> (usize, &'static str) {
        assert_eq!(
            scan_checked_canonical(text.as_bytes()),
            parse_checked_canonical(text.as_bytes()).map(drop),
            "the scan and the parse disagree on {text}"
        );
        match parse_checked_canonical(text.as_bytes()) {
            Err(JsonError {
                problem: JsonProblem::NotCanonical { offset, expected },
                ..
            }) => (offset, expected),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn canonical_check_accepts_what_rfc8785_writes() {
        for text in [
            r#"{"a":[1,-2,3.5,1e+21,0.000001,"x\u001f\n\"\\é😀/"],"b":{},"c":null,"d":true}"#,
            r#"{"\r":1,"1":2,"€":3,"😀":4,"דּ":5}"#,
            "[]",
            "0",
        ] {
            assert!(parse_checked_canonical(text.as_bytes()).is_ok(), "{text}");
            assert!(scan_checked_canonical(text.as_bytes()).is_ok(), "{text}");
            assert_eq!(
                parse_checked_canonical(text.as_bytes()),
                parse_canonical(text.as_bytes())
            );
        }
    }

    #[test]
    fn canonical_check_names_the_first_byte_that_differs() {
        assert_eq!(not_canonical(r#"{"a": 1}"#).0, 5);
        assert_eq!(not_canonical("{\"a\":1}\n").0, 7);
        assert_eq!(
            not_canonical(r#"{"b":1,"a":2}"#),
            (7, "members sorted by UTF-16 code units")
        );
        // UTF-16 order, not code point order: U+1F600 sorts before U+FB33.
        assert_eq!(not_canonical(r#"{"דּ":1,"😀":2}"#).0, 9);
        assert_eq!(not_canonical(r#"["\/"]"#), (2, "the character itself, unescaped"));
        assert_eq!(
            not_canonical(r#"["\u0041"]"#),
            (2, "the character itself, unescaped")
        );
        assert_eq!(not_canonical(r#"["\u000a"]"#), (2, "the two-character escape"));
        assert_eq!(not_canonical(r#"["\u001F"]"#), (2, "a lowercase \\u00xx escape"));
        assert_eq!(not_canonical("[1.0]"), (1, "the number in its ECMAScript form"));
        assert_eq!(not_canonical("[1e2]").0, 1);
        assert_eq!(not_canonical("[-0]").0, 1);
        assert_eq!(not_canonical("[1E+21]").0, 1);
    }

    #[test]
    fn the_scan_refuses_what_the_canonical_parse_refuses_with_the_same_error() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        for text in [
            &br#"{"a":1,"a":2}"#[..],
            br#"{"a":{"b":[1,{"c":"\ud800"}]}}"#,
            b"[\"\xff\"]",
            br#"[123456789012345678901234567890e400]"#,
            br#"{"a":1}x"#,
            br#"{"a":[1,2,}"#,
            br#"["unterminated"#,
            b"[\"a\x01\"]",
            br#"{"k":[0,1,"\u00e9"]}"#,
            deep.as_bytes(),
        ] {
            let parsed = parse_checked_canonical(text).map(drop);
            assert!(parsed.is_err(), "{}", String::from_utf8_lossy(text));
            assert_eq!(
                scan_checked_canonical(text),
                parsed,
                "{}",
                String::from_utf8_lossy(text)
            );
            assert_eq!(
                scan_checked_canonical_entry(text).map(drop),
                parsed,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn member_order_is_utf16_order_on_every_pair() {
        // ASCII, Latin-1, the BMP above the surrogates (U+E000…U+FFFF sorts after a supplementary
        // character in UTF-16, before it in UTF-8), supplementary characters, prefixes, equals.
        let keys = [
            "",
            "a",
            "aa",
            "ab",
            "b",
            "Z",
            "é",
            "aé",
            "a\u{e9}b",
            "\u{e000}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "a\u{1f600}",
            "a\u{ffff}",
            "\u{7f}",
            "\u{80}",
        ];
        for last in keys {
            for next in keys {
                let expected = next.encode_utf16().cmp(last.encode_utf16()).is_gt();
                assert_eq!(utf16_ascending(last, next), expected, "{last:?} then {next:?}");
            }
        }
    }

    #[test]
    fn an_entry_scan_keeps_the_top_level_members_and_the_event_attributes_only() {
        let text = concat!(
            r#"{"a":{"event":{"id":"no"}},"event":{"data":{"id":"no","ledger":1,"type":"no"},"#,
            r#""event":{"source":"no"},"id":"a\n\"b","specversion":"1.0","tenant":7,"type":"t"},"#,
            r#""ledger":[{"event":{"id":"no"}}],"z":{"ledger":2}}"#
        );
        let outline = scan_checked_canonical_entry(text.as_bytes()).unwrap();
        let event = outline.event.unwrap();
        assert!(event.starts_with(br#"{"data":"#) && event.ends_with(br#""type":"t"}"#));
        assert_eq!(outline.ledger, Some(&br#"[{"event":{"id":"no"}}]"#[..]));
        let [specversion, id, source, ty, tenant] = outline.attributes;
        assert_eq!(specversion, Some(Member::Text(Cow::Borrowed("1.0"))));
        assert!(matches!(id, Some(Member::Text(Cow::Owned(id))) if id == "a\n\"b"));
        assert_eq!(source, None);
        assert!(matches!(ty, Some(Member::Text(Cow::Borrowed("t")))));
        assert_eq!(tenant, Some(Member::Other(b"7")));
        // Nothing is kept of a top level that is not an object.
        let outline = scan_checked_canonical_entry(br#"[{"event":{"id":"no"}}]"#).unwrap();
        assert!(outline.event.is_none() && outline.attributes.iter().all(Option::is_none));
    }

    fn problem(text: &[u8]) -> JsonError {
        parse(text).expect_err("should be refused")
    }

    #[test]
    fn accepts_ordinary_json() {
        let value =
            parse(br#" {"a": [1, -2, 3.5, "x\u00e9\ud83d\ude00", true, false, null], "b": {}} "#).unwrap();
        assert_eq!(value["a"][3], "xé😀");
        assert_eq!(value["a"][1], -2);
        assert_eq!(
            parse(b"9007199254740991").unwrap(),
            serde_json::json!(9007199254740991_u64)
        );
        assert_eq!(
            parse(b"-9007199254740991").unwrap(),
            serde_json::json!(-9007199254740991_i64)
        );
        assert_eq!(parse(b"1E30").unwrap().as_f64(), Some(1e30));
        assert_eq!(parse(b"-0").unwrap(), serde_json::json!(0));
    }

    #[test]
    fn integer_values_match_serde_json() {
        for text in ["0", "-1", "42", "[1,2]", "{\"a\":-5}", "1.5", "3.0"] {
            assert_eq!(
                parse(text.as_bytes()).unwrap(),
                serde_json::from_str::<Value>(text).unwrap(),
                "{text}"
            );
        }
    }

    #[test]
    fn duplicate_key_is_named_with_its_path() {
        let e = problem(br#"{"x": {"a": 1, "b": 2, "a": 3}}"#);
        assert_eq!(e.problem, JsonProblem::DuplicateKey { key: "a".into() });
        assert_eq!(e.path, "/x/a");
        // Keys compare after unescaping.
        let e = problem(br#"{"a": 1, "\u0061": 2}"#);
        assert!(matches!(e.problem, JsonProblem::DuplicateKey { .. }));
    }

    #[test]
    fn big_integer_literal_is_refused() {
        let e = problem(br#"{"n": [0, 9007199254740992]}"#);
        assert_eq!(
            e.problem,
            JsonProblem::IntegerOutOfRange {
                literal: "9007199254740992".into()
            }
        );
        assert_eq!(e.path, "/n/1");
        let e = problem(b"-9007199254740992");
        assert!(matches!(e.problem, JsonProblem::IntegerOutOfRange { .. }));
        let e = problem(b"123456789012345678901234567890");
        assert!(matches!(e.problem, JsonProblem::IntegerOutOfRange { .. }));
    }

    #[test]
    fn overflowing_number_is_refused() {
        let e = problem(br#"{"big": 1e400}"#);
        assert_eq!(
            e.problem,
            JsonProblem::NumberOverflow {
                literal: "1e400".into()
            }
        );
        assert_eq!(e.path, "/big");
        assert!(matches!(
            problem(b"-1.5e309").problem,
            JsonProblem::NumberOverflow { .. }
        ));
    }

    #[test]
    fn lone_surrogates_are_refused() {
        let e = problem(br#"{"s": "\ud800"}"#);
        assert_eq!(e.problem, JsonProblem::LoneSurrogate { code_unit: 0xd800 });
        assert_eq!(e.path, "/s");
        assert!(matches!(
            problem(br#""\udc00x""#).problem,
            JsonProblem::LoneSurrogate { code_unit: 0xdc00 }
        ));
        assert!(matches!(
            problem(br#""\ud800\u0041""#).problem,
            JsonProblem::LoneSurrogate { .. }
        ));
    }

    #[test]
    fn invalid_utf8_is_refused() {
        let e = problem(b"{\"k\": [\"ok\", \"bad \xff\xfe\"]}");
        assert_eq!(e.problem, JsonProblem::InvalidUtf8 { offset: 18 });
        assert_eq!(e.path, "/k/1");
        assert!(e.problem.is_ijson_violation());
    }

    #[test]
    fn syntax_errors_and_depth_are_not_ijson_violations() {
        for bad in [
            &b""[..],
            b"{",
            b"[1,]",
            b"01",
            b"1.",
            b"\"a",
            b"{\"a\" 1}",
            b"nul",
            b"1 2",
            b"\"\x01\"",
        ] {
            let e = problem(bad);
            assert!(matches!(e.problem, JsonProblem::Syntax { .. }), "{bad:?}: {e}");
            assert!(!e.problem.is_ijson_violation());
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(problem(deep.as_bytes()).problem, JsonProblem::TooDeep);
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn canonical_reading_takes_big_integer_literals_as_doubles() {
        assert_eq!(
            parse_canonical(b"100000000000000000000").unwrap().as_f64(),
            Some(1e20)
        );
        assert_eq!(parse_canonical(b"[5]").unwrap(), serde_json::json!([5]));
        assert!(matches!(
            parse_canonical(br#"{"a":1,"a":2}"#).unwrap_err().problem,
            JsonProblem::DuplicateKey { .. }
        ));
        assert!(matches!(
            parse(b"100000000000000000000").unwrap_err().problem,
            JsonProblem::IntegerOutOfRange { .. }
        ));
    }

    #[test]
    fn pointer_escapes_tilde_and_slash() {
        let e = problem(br#"{"a/b": {"c~d": [1e999]}}"#);
        assert_eq!(e.path, "/a~1b/c~0d/0");
    }
}
