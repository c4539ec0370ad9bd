//! The built-in functions whose work is the product of their inputs' sizes — `instr(X,Y)`,
//! `replace(X,Y,Z)`, `trim`/`ltrim`/`rtrim(X,Y)`, `like(P,S[,E])` and `glob(P,S)` (so the LIKE and
//! GLOB operators too) — replaced on the sandbox's connection by ports of SQLite's own algorithms
//! (sqlite3.c 3.50: `instrFunc`, `replaceFunc`, `trimFunc`, `likeFunc`, `patternCompare`) that give
//! the same answers and look at the statement's interrupt as they work.
//!
//! SQLite sees an interrupt only between its VM operations, so one call of the originals runs to its
//! end: `instr` of a 4 MB string and a 400 KB one that does not occur in it took 37 s, `trim` of two
//! 64 KiB strings 12 s. The ports stop within about a millisecond of the deadline or a cancel.
//! `unhex(X,Y)` (every character of X looked up in Y) is refused rather than ported. `printf` and
//! `format` are wrapped so that a result past the length limit is an error, not a silent NULL.
//!
//! Arguments are taken as SQLite takes them: text and blobs as their bytes (not necessarily UTF-8),
//! integers in decimal, reals as SQLite writes them (asked of SQLite itself), NULL giving NULL.

use std::borrow::Cow;
use std::cell::RefCell;
use std::os::raw::c_int;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, ffi};

use super::{Guard, MAX_PATTERN_BYTES, MAX_VALUE_BYTES};

/// Byte comparisons between two looks at the interrupt: well under a millisecond of work.
const CHECK_EVERY: u64 = 1 << 20;

/// Replaces the functions on `conn`; a refusal is written to `denied` for the caller's error.
pub(super) fn install(
    conn: &Connection,
    guard: &Guard,
    denied: &Arc<Mutex<Option<String>>>,
) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let g = guard.clone();
    conn.create_scalar_function("instr", 2, flags, move |ctx| instr(ctx, &mut Work::new(&g)))?;
    let g = guard.clone();
    conn.create_scalar_function("replace", 3, flags, move |ctx| replace(ctx, &mut Work::new(&g)))?;
    for (name, sides) in [("trim", LEFT | RIGHT), ("ltrim", LEFT), ("rtrim", RIGHT)] {
        let g = guard.clone();
        conn.create_scalar_function(name, 2, flags, move |ctx| trim(ctx, sides, &mut Work::new(&g)))?;
    }
    for (name, args, info) in [("like", 2, LIKE), ("like", 3, LIKE), ("glob", 2, GLOB)] {
        let g = guard.clone();
        conn.create_scalar_function(name, args, flags, move |ctx| like(ctx, info, &mut Work::new(&g)))?;
    }
    for name in ["printf", "format"] {
        conn.create_scalar_function(name, -1, flags, printf)?;
    }
    let denied = Arc::clone(denied);
    conn.create_scalar_function("unhex", 2, flags, move |_ctx| -> rusqlite::Result<Option<Vec<u8>>> {
        let reason = "function unhex() with a second argument is not allowed: it compares every character of the \
                      first with every character of the second";
        denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| reason.to_owned());
        Err(rusqlite::Error::UserFunctionError(reason.into()))
    })?;
    Ok(())
}

/// Counts a call's work and looks at the interrupt every [`CHECK_EVERY`] units.
struct Work<'a> {
    guard: &'a Guard,
    done: u64,
}

impl<'a> Work<'a> {
    fn new(guard: &'a Guard) -> Self {
        Self { guard, done: 0 }
    }

    fn add(&mut self, units: usize) -> rusqlite::Result<()> {
        self.done += units as u64;
        if self.done >= CHECK_EVERY {
            self.done = 0;
            if self.guard.should_stop() {
                return Err(code(ffi::SQLITE_INTERRUPT));
            }
        }
        Ok(())
    }
}

/// An error carrying only SQLite's code (so SQLite's own message and code reach the statement).
fn code(code: c_int) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
}

/// An error with SQLite's generic code and this message, as `sqlite3_result_error` makes.
fn message(text: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_ERROR), Some(text.to_owned()))
}

/// Text with the bytes as they are: SQLite's strings need not be valid UTF-8.
struct RawText(Vec<u8>);

impl ToSql for RawText {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(&self.0)))
    }
}

/// `sqlite3_value_text`: the bytes SQLite reads a value as; `None` for NULL.
fn text(value: ValueRef<'_>) -> rusqlite::Result<Option<Cow<'_, [u8]>>> {
    Ok(match value {
        ValueRef::Null => None,
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Some(Cow::Borrowed(bytes)),
        ValueRef::Integer(i) => Some(Cow::Owned(i.to_string().into_bytes())),
        ValueRef::Real(r) => Some(Cow::Owned(real_text(r)?.into_bytes())),
    })
}

/// How SQLite writes a real (`%!.15g` with its own rounding), asked of SQLite rather than
/// reimplemented. Reals are at most a few dozen bytes, so nothing here is costly.
fn real_text(r: f64) -> rusqlite::Result<String> {
    with_builtins(|conn| conn.query_row("SELECT CAST(?1 AS TEXT)", [r], |row| row.get(0)))
}

/// `printf(F, …)` and `format(F, …)`, computed by SQLite's own printf with the same arguments and the
/// same length limit: SQLite's printf answers NULL when its result would pass the limit, which would
/// hide why; here that is the "string or blob too big" error every other function gives. Its work is
/// linear in the result, which the limit bounds.
fn printf(ctx: &Context<'_>) -> rusqlite::Result<Option<RawText>> {
    let format_given = !ctx.is_empty() && !matches!(ctx.get_raw(0), ValueRef::Null);
    let args: Vec<ToSqlOutput<'_>> = (0..ctx.len())
        .map(|i| ToSqlOutput::Borrowed(ctx.get_raw(i)))
        .collect();
    let placeholders = (1..=args.len())
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    with_builtins(|conn| {
        let made = conn
            .prepare_cached(&format!("SELECT printf({placeholders})"))?
            .query_row(rusqlite::params_from_iter(args.iter()), |row| {
                Ok(match row.get_ref(0)? {
                    ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Some(bytes.to_vec()),
                    _ => None,
                })
            })?;
        if made.is_some() || !format_given {
            return Ok(made.map(RawText));
        }
        // NULL for a format: an empty result (SQLite answers NULL for one) or one past the limit;
        // a character in front tells them apart.
        let overflowed = conn
            .prepare_cached(&format!("SELECT printf('x' || {placeholders}) IS NULL"))?
            .query_row(rusqlite::params_from_iter(args.iter()), |row| {
                row.get::<_, bool>(0)
            })?;
        if overflowed {
            Err(code(ffi::SQLITE_TOOBIG))
        } else {
            Ok(None)
        }
    })
}

/// A private in-memory connection of this thread with SQLite's own functions and the sandbox's
/// length limit: what the replacements ask when SQLite's exact answer is cheap to get there.
fn with_builtins<T>(run: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    thread_local! {
        static BUILTINS: RefCell<Option<Connection>> = const { RefCell::new(None) };
    }
    BUILTINS.with(|cell| {
        let mut cell = cell.borrow_mut();
        let conn = match cell.take() {
            Some(conn) => conn,
            None => {
                let conn = Connection::open_in_memory()?;
                conn.set_limit(
                    rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH,
                    i32::try_from(MAX_VALUE_BYTES).unwrap_or(i32::MAX),
                )?;
                conn
            }
        };
        let answer = run(&conn);
        *cell = Some(conn);
        answer
    })
}

/// The bytes up to the first NUL: what SQLite's C-string loops (LIKE, GLOB, a trim set) see.
fn c_string(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())]
}

/// `instr(X, Y)`: the 1-based position of Y's first occurrence in X, in characters (bytes when both
/// are blobs); 0 when absent, 1 for an empty Y.
fn instr(ctx: &Context<'_>, work: &mut Work<'_>) -> rusqlite::Result<Option<i64>> {
    let (haystack, needle) = (ctx.get_raw(0), ctx.get_raw(1));
    let in_text = !matches!((haystack, needle), (ValueRef::Blob(_), ValueRef::Blob(_)));
    let (Some(haystack), Some(needle)) = (text(haystack)?, text(needle)?) else {
        return Ok(None);
    };
    if needle.is_empty() {
        return Ok(Some(1));
    }
    let (mut at, mut position) = (0, 1);
    while needle.len() <= haystack.len() - at {
        if haystack[at] == needle[0] {
            work.add(needle.len())?;
            if haystack[at..at + needle.len()] == *needle {
                return Ok(Some(position));
            }
        } else {
            work.add(1)?;
        }
        position += 1;
        at += 1;
        while in_text && at < haystack.len() && haystack[at] & 0xc0 == 0x80 {
            at += 1;
        }
    }
    Ok(Some(0))
}

/// `replace(X, Y, Z)`: X with every non-overlapping Y, left to right, replaced by Z; X itself (as
/// text) when Y is empty.
fn replace(ctx: &Context<'_>, work: &mut Work<'_>) -> rusqlite::Result<Option<RawText>> {
    let Some(subject) = text(ctx.get_raw(0))? else {
        return Ok(None);
    };
    let Some(pattern) = text(ctx.get_raw(1))? else {
        return Ok(None);
    };
    if pattern.first().is_none_or(|&b| b == 0) {
        return Ok(Some(RawText(subject.into_owned())));
    }
    let Some(with) = text(ctx.get_raw(2))? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(subject.len());
    let mut i = 0;
    while subject.len() >= pattern.len() && i <= subject.len() - pattern.len() {
        if subject[i] != pattern[0] {
            work.add(1)?;
            out.push(subject[i]);
            i += 1;
            continue;
        }
        work.add(pattern.len())?;
        if subject[i..i + pattern.len()] != *pattern {
            out.push(subject[i]);
            i += 1;
            continue;
        }
        out.extend_from_slice(&with);
        i += pattern.len();
        if with.len() > pattern.len() && out.len() + (subject.len() - i) > MAX_VALUE_BYTES {
            return Err(code(ffi::SQLITE_TOOBIG));
        }
    }
    out.extend_from_slice(&subject[i..]);
    Ok(Some(RawText(out)))
}

const LEFT: u8 = 1;
const RIGHT: u8 = 2;

/// `trim(X, Y)`, `ltrim`, `rtrim`: X without the characters of Y at its start, its end or both.
fn trim(ctx: &Context<'_>, sides: u8, work: &mut Work<'_>) -> rusqlite::Result<Option<RawText>> {
    let Some(subject) = text(ctx.get_raw(0))? else {
        return Ok(None);
    };
    let Some(set) = text(ctx.get_raw(1))? else {
        return Ok(None);
    };
    // The set's characters as SQLITE_SKIP_UTF8 splits them: a byte and its continuation bytes.
    let set = c_string(&set);
    let mut characters: Vec<&[u8]> = Vec::new();
    let mut at = 0;
    while at < set.len() {
        let start = at;
        at += 1;
        if set[start] >= 0xc0 {
            while at < set.len() && set[at] & 0xc0 == 0x80 {
                at += 1;
            }
        }
        characters.push(&set[start..at]);
    }
    let (mut start, mut end) = (0, subject.len());
    if !characters.is_empty() {
        if sides & LEFT != 0 {
            while start < end {
                work.add(characters.len())?;
                let rest = &subject[start..end];
                match characters.iter().find(|c| rest.starts_with(c)) {
                    Some(c) => start += c.len(),
                    None => break,
                }
            }
        }
        if sides & RIGHT != 0 {
            while start < end {
                work.add(characters.len())?;
                let rest = &subject[start..end];
                match characters.iter().find(|c| rest.ends_with(c)) {
                    Some(c) => end -= c.len(),
                    None => break,
                }
            }
        }
    }
    Ok(Some(RawText(subject[start..end].to_vec())))
}

/// The wildcards of LIKE or GLOB (`struct compareInfo`).
#[derive(Clone, Copy)]
struct Wildcards {
    /// `%` or `*`; 0 when the ESCAPE character is this one.
    any: u32,
    /// `_` or `?`; 0 when the ESCAPE character is this one.
    one: u32,
    /// `[` for GLOB's sets, 0 for LIKE.
    set: u32,
    /// LIKE folds ASCII case.
    fold_case: bool,
}

const LIKE: Wildcards = Wildcards {
    any: b'%' as u32,
    one: b'_' as u32,
    set: 0,
    fold_case: true,
};
const GLOB: Wildcards = Wildcards {
    any: b'*' as u32,
    one: b'?' as u32,
    set: b'[' as u32,
    fold_case: false,
};

/// `like(P, S[, E])` and `glob(P, S)`: 1 when S matches the pattern P, else 0 (`likeFunc`).
fn like(ctx: &Context<'_>, wildcards: Wildcards, work: &mut Work<'_>) -> rusqlite::Result<Option<i64>> {
    let pattern = text(ctx.get_raw(0))?;
    if pattern.as_ref().map_or(0, |p| p.len()) > MAX_PATTERN_BYTES {
        return Err(message("LIKE or GLOB pattern too complex"));
    }
    let mut wildcards = wildcards;
    let escape = if ctx.len() == 3 {
        let Some(escape) = text(ctx.get_raw(2))? else {
            return Ok(None);
        };
        let escape = c_string(&escape);
        let (mut characters, mut i) = (0, 0);
        while i < escape.len() {
            skip_character(escape, &mut i);
            characters += 1;
        }
        if characters != 1 {
            return Err(message("ESCAPE expression must be a single character"));
        }
        let escape = read(escape, &mut 0);
        if escape == wildcards.any {
            wildcards.any = 0;
        }
        if escape == wildcards.one {
            wildcards.one = 0;
        }
        escape
    } else {
        wildcards.set
    };
    let (Some(pattern), Some(subject)) = (pattern, text(ctx.get_raw(1))?) else {
        return Ok(None);
    };
    let mut matcher = Matcher {
        pattern: c_string(&pattern),
        subject: c_string(&subject),
        wildcards,
        other: escape,
        work,
    };
    Ok(Some(i64::from(matcher.compare(0, 0)? == Match::Yes)))
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Match {
    /// SQLITE_MATCH.
    Yes,
    /// SQLITE_NOMATCH: no match here; a `%` before may still find one further on.
    No,
    /// SQLITE_NOWILDCARDMATCH: no match from here on, whatever a `%` before tries.
    Never,
}

/// `patternCompare`: the pattern and subject are C strings (no NUL inside); reading past either's
/// end yields 0, the terminator SQLite reads there.
struct Matcher<'p, 'w, 'g> {
    pattern: &'p [u8],
    subject: &'p [u8],
    wildcards: Wildcards,
    /// The ESCAPE character (LIKE) or `[` (GLOB), as `matchOther`.
    other: u32,
    work: &'w mut Work<'g>,
}

impl Matcher<'_, '_, '_> {
    fn compare(&mut self, mut p: usize, mut s: usize) -> rusqlite::Result<Match> {
        let Wildcards {
            any,
            one,
            set,
            fold_case,
        } = self.wildcards;
        let mut escaped_at = None;
        loop {
            self.work.add(1)?;
            let mut c = read(self.pattern, &mut p);
            if c == 0 {
                break;
            }
            if c == any {
                // Runs of `%` and `_` after it: each `_` takes one character of the subject.
                loop {
                    c = read(self.pattern, &mut p);
                    if c == any {
                        continue;
                    }
                    if c == one && one != 0 {
                        if read(self.subject, &mut s) == 0 {
                            return Ok(Match::Never);
                        }
                        continue;
                    }
                    break;
                }
                if c == 0 {
                    return Ok(Match::Yes);
                }
                if c == self.other {
                    if set == 0 {
                        c = read(self.pattern, &mut p);
                        if c == 0 {
                            return Ok(Match::Never);
                        }
                    } else {
                        // "[...]" right after "*": the slow recursive search.
                        while at(self.subject, s) != 0 {
                            let found = self.compare(p - 1, s)?;
                            if found != Match::No {
                                return Ok(found);
                            }
                            skip_character(self.subject, &mut s);
                        }
                        return Ok(Match::Never);
                    }
                }
                if c < 0x80 {
                    let (upper, lower) = if fold_case {
                        (ascii_upper(c), ascii_lower(c))
                    } else {
                        (c, c)
                    };
                    loop {
                        let skipped = self.subject[s.min(self.subject.len())..]
                            .iter()
                            .position(|&b| u32::from(b) == upper || u32::from(b) == lower)
                            .unwrap_or(self.subject.len().saturating_sub(s));
                        self.work.add(skipped)?;
                        s += skipped;
                        if at(self.subject, s) == 0 {
                            break;
                        }
                        s += 1;
                        let found = self.compare(p, s)?;
                        if found != Match::No {
                            return Ok(found);
                        }
                    }
                } else {
                    loop {
                        let c2 = read(self.subject, &mut s);
                        if c2 == 0 {
                            break;
                        }
                        self.work.add(1)?;
                        if c2 != c {
                            continue;
                        }
                        let found = self.compare(p, s)?;
                        if found != Match::No {
                            return Ok(found);
                        }
                    }
                }
                return Ok(Match::Never);
            }
            if c == self.other {
                if set == 0 {
                    c = read(self.pattern, &mut p);
                    if c == 0 {
                        return Ok(Match::No);
                    }
                    escaped_at = Some(p);
                } else {
                    let c = read(self.subject, &mut s);
                    if c == 0 {
                        return Ok(Match::No);
                    }
                    let (mut prior, mut seen, mut invert) = (0, false, false);
                    let mut c2 = read(self.pattern, &mut p);
                    if c2 == u32::from(b'^') {
                        invert = true;
                        c2 = read(self.pattern, &mut p);
                    }
                    if c2 == u32::from(b']') {
                        if c == u32::from(b']') {
                            seen = true;
                        }
                        c2 = read(self.pattern, &mut p);
                    }
                    while c2 != 0 && c2 != u32::from(b']') {
                        self.work.add(1)?;
                        let next = at(self.pattern, p);
                        if c2 == u32::from(b'-') && next != b']' && next != 0 && prior > 0 {
                            c2 = read(self.pattern, &mut p);
                            if c >= prior && c <= c2 {
                                seen = true;
                            }
                            prior = 0;
                        } else {
                            if c == c2 {
                                seen = true;
                            }
                            prior = c2;
                        }
                        c2 = read(self.pattern, &mut p);
                    }
                    if c2 == 0 || !(seen ^ invert) {
                        return Ok(Match::No);
                    }
                    continue;
                }
            }
            let c2 = read(self.subject, &mut s);
            if c == c2 {
                continue;
            }
            if fold_case && c < 0x80 && c2 < 0x80 && ascii_lower(c) == ascii_lower(c2) {
                continue;
            }
            if c == one && escaped_at != Some(p) && c2 != 0 {
                continue;
            }
            return Ok(Match::No);
        }
        Ok(if at(self.subject, s) == 0 {
            Match::Yes
        } else {
            Match::No
        })
    }
}

/// The byte at `i`, or the terminator past the end.
fn at(bytes: &[u8], i: usize) -> u8 {
    bytes.get(i).copied().unwrap_or(0)
}

/// `sqlite3Utf8Read`: the character at `*i` (lenient: overlong, surrogate and non-characters read as
/// U+FFFD), advancing past it; 0 at the end (and past it, one step further, as the C pointer does).
fn read(bytes: &[u8], i: &mut usize) -> u32 {
    /// `sqlite3Utf8Trans1`: the payload bits of a lead byte 0xc0..=0xff.
    const LEAD: [u8; 64] = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x00, 0x01,
        0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x00, 0x01, 0x02,
        0x03, 0x04, 0x05, 0x06, 0x07, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x00, 0x00,
    ];
    let lead = at(bytes, *i);
    *i += 1;
    if lead < 0xc0 {
        return u32::from(lead);
    }
    let mut c = u32::from(LEAD[usize::from(lead - 0xc0)]);
    while at(bytes, *i) & 0xc0 == 0x80 {
        c = (c << 6).wrapping_add(u32::from(0x3f & at(bytes, *i)));
        *i += 1;
    }
    if c < 0x80 || (c & 0xFFFF_F800) == 0xD800 || (c & 0xFFFF_FFFE) == 0xFFFE {
        0xFFFD
    } else {
        c
    }
}

/// `SQLITE_SKIP_UTF8`: past one character (a lead byte and its continuation bytes).
fn skip_character(bytes: &[u8], i: &mut usize) {
    let lead = at(bytes, *i);
    *i += 1;
    if lead >= 0xc0 {
        while at(bytes, *i) & 0xc0 == 0x80 {
            *i += 1;
        }
    }
}

fn ascii_lower(c: u32) -> u32 {
    if (u32::from(b'A')..=u32::from(b'Z')).contains(&c) {
        c + 32
    } else {
        c
    }
}

fn ascii_upper(c: u32) -> u32 {
    if (u32::from(b'a')..=u32::from(b'z')).contains(&c) {
        c - 32
    } else {
        c
    }
}
