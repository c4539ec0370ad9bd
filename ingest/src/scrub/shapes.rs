//! Secret shapes: credential-shaped names, and the detectors that find a secret embedded in a longer
//! text (a command line, a URL, a tool result, a quarantined body that did not parse).
//!
//! ```text
//! text ─▶ one pass over its bytes for the anchors ─┬─ ' ' / tab ─▶ auth scheme (`Bearer`, `Basic`)
//!                                                  ├─ ':' ─▶ header line, quoted member, URL userinfo,
//!                                                  │         config line
//!                                                  └─ '=' ─▶ assignment
//!      ─▶ regexes with literal prefixes (known token prefixes, PEM private keys)
//!      ─▶ byte range of each secret alone ─▶ ranges merged, ranges over existing markers dropped
//! ```
//!
//! Each detector returns the range of the secret alone: the scheme word of `Bearer …`, a variable's
//! name, a URL's host stay, so the text still says what was done with what. The scrubber replaces each
//! range by a textual marker ([`super::TEXT_MARKER_PREFIX`]); a range that touches a marker already
//! there is dropped, which keeps scrubbing idempotent. The table in `docs/ingest.md` (Secrets and
//! payloads) lists the same detectors with examples of what they match and what they leave alone.
//!
//! The checks behind each anchor are what keep ordinary text intact: a `Bearer` followed by a word is
//! prose, not a token (a token has a digit, or is long and mixed-case); `Basic` needs base64 of
//! `user:password`; `NAME=value` needs a credential-shaped name ([`is_credential_name`]), not
//! `max_tokens` or `page_token`; a URL's userinfo needs a password (`git@` is a user name); a
//! `name: value` line needs the name at the line's start and one word after it (prose has more).
//!
//! The anchored detectors are written by hand rather than as regexes: every string of every event
//! goes through them, and a regex without a literal to look for first (`[a-z_]*token=…`) runs its
//! automaton over every byte; a pass that stops only at `:`, `=`, blanks and a few other bytes costs
//! a quarter as much (`examples/scrub_cost.rs`).

use std::ops::Range;
use std::sync::LazyLock;

use base64::Engine;
use regex::Regex;

/// The shortest text a detector can find anything in (`secret=x` is 8 bytes).
const MIN_TEXT: usize = 8;

/// A detector of a secret shape inside text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    /// `Bearer <token>` or `Basic <base64 of user:password>` anywhere in the text.
    AuthScheme,
    /// An HTTP credential header written out: `Authorization: …`, `X-Api-Key: …`, `Cookie: …`.
    HeaderLine,
    /// `NAME=value` with a credential-shaped name: an environment assignment, a query parameter, a flag.
    Assignment,
    /// `"name": "value"` (or single-quoted) with a credential-shaped name: JSON or a dict as text.
    QuotedMember,
    /// The userinfo of `scheme://user:password@host`.
    UrlUserinfo,
    /// `name: value` starting a line, with a credential-shaped name: YAML, an ini or `.properties`
    /// file, a `.env`-style listing printed into a result.
    ConfigLine,
    /// A token whose prefix says what it is (GitHub, GitLab, Slack, OpenAI, Anthropic, AWS, Google).
    KnownPrefix,
    /// A PEM private key block.
    PrivateKey,
}

/// One secret found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its byte range.
    pub range: Range<usize>,
    /// The detector that found it.
    pub shape: Shape,
}

/// HTTP headers whose value is a credential, lowercase (a header line's name ends in one of them).
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "private-token",
    "x-amz-security-token",
    "cookie",
];

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| unreachable!("a detector's pattern compiles: {e}"))
}

static KNOWN_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?-u:\b)(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,}|glpat-[A-Za-z0-9_\-]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}|sk-[A-Za-z0-9_\-]{20,}|AKIA[0-9A-Z]{16}(?-u:\b)|AIza[0-9A-Za-z_\-]{35})",
    )
});

static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)")
});

/// Every secret in `text`, in order, overlapping finds merged (the first detector's shape kept, in
/// the order they run: a header line's credential is a header line's, not a bare `Bearer`), none
/// touching a textual marker already in the text.
pub fn find(text: &str) -> Vec<Found> {
    scan(text).found
}

/// What one pass over a text found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The secrets, as [`find`] returns them.
    pub found: Vec<Found>,
    /// Whether the text already holds a textual marker (a scrubbed text, scrubbed again).
    pub marked: bool,
}

/// Bytes the pass stops at: the anchors of the hand-written detectors, and the first bytes of what
/// the regexes and the marker check look for. Everything else is skipped by one table lookup.
static STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut i = 0;
    let bytes = b":= \t_-A[";
    while i < bytes.len() {
        stops[bytes[i] as usize] = true;
        i += 1;
    }
    stops
};

/// [`find`], and whether the text holds a textual marker already, in one pass over its bytes.
pub fn scan(text: &str) -> Scan {
    let mut scan = Scan::default();
    if text.len() < MIN_TEXT {
        return scan;
    }
    let bytes = text.as_bytes();
    let (mut prefixed, mut private_key) = (false, false);
    let mut next = 0;
    // A tight search for the next stop, then the stop's work: the compiler keeps the search in
    // registers, which a loop over every byte with the work inline did not.
    while let Some(offset) = bytes[next..].iter().position(|b| STOPS[usize::from(*b)]) {
        let at = next + offset;
        next = at + 1;
        let (shape, range) = match bytes[at] {
            b':' => {
                if let Some(range) = header_line(bytes, at) {
                    (Shape::HeaderLine, range)
                } else if let Some(range) = quoted_member(text, at) {
                    (Shape::QuotedMember, range)
                } else if let Some(range) = url_userinfo(text, at) {
                    (Shape::UrlUserinfo, range)
                } else if let Some(range) = config_line(text, at) {
                    (Shape::ConfigLine, range)
                } else {
                    continue;
                }
            }
            b'=' => match assignment(text, at) {
                Some(range) => (Shape::Assignment, range),
                None => continue,
            },
            b' ' | b'\t' => match auth_scheme(text, at) {
                Some(range) => (Shape::AuthScheme, range),
                None => continue,
            },
            b'_' | b'-' | b'A' => {
                prefixed |= known_prefix_at(bytes, at);
                private_key |= bytes[at..].starts_with(b"-----BEGIN ");
                continue;
            }
            _ => {
                scan.marked |= bytes[at..].starts_with(super::TEXT_MARKER_PREFIX.as_bytes());
                continue;
            }
        };
        scan.found.push(Found { range, shape });
    }
    if prefixed {
        for m in KNOWN_PREFIX.find_iter(text) {
            if m.as_str().bytes().any(|b| b.is_ascii_digit()) {
                scan.found.push(Found {
                    range: m.range(),
                    shape: Shape::KnownPrefix,
                });
            }
        }
    }
    if private_key {
        for m in PRIVATE_KEY.find_iter(text) {
            scan.found.push(Found {
                range: m.range(),
                shape: Shape::PrivateKey,
            });
        }
    }
    if !scan.found.is_empty() {
        if scan.marked {
            let markers = existing_markers(text);
            scan.found.retain(|f| {
                !markers
                    .iter()
                    .any(|m| f.range.start < m.end && m.start < f.range.end)
            });
        }
        scan.found = merge(std::mem::take(&mut scan.found));
    }
    scan
}

/// Whether a known token prefix ends (`ghp_`, `sk-`, `xoxb-`, …) or starts (`AKIA`, `AIza`) at `at`:
/// only then is [`KNOWN_PREFIX`] worth running.
fn known_prefix_at(bytes: &[u8], at: usize) -> bool {
    let before = &bytes[..at];
    match bytes[at] {
        b'_' => {
            before.ends_with(b"github_pat")
                || (before.len() >= 3 && before[before.len() - 3..before.len() - 1] == *b"gh")
        }
        b'-' => {
            before.ends_with(b"sk")
                || before.ends_with(b"glpat")
                || (before.len() >= 4 && before[before.len() - 4..before.len() - 1] == *b"xox")
        }
        _ => bytes[at..].starts_with(b"AKIA") || bytes[at..].starts_with(b"AIza"),
    }
}

/// The ranges of textual markers already in `text`.
fn existing_markers(text: &str) -> Vec<Range<usize>> {
    text.match_indices(super::TEXT_MARKER_PREFIX)
        .map(|(start, _)| {
            let end = text[start..].find(']').map_or(text.len(), |i| start + i + 1);
            start..end
        })
        .collect()
}

/// Sorted by start, overlapping ranges joined.
fn merge(mut found: Vec<Found>) -> Vec<Found> {
    found.sort_by_key(|f| (f.range.start, std::cmp::Reverse(f.range.end)));
    let mut merged: Vec<Found> = Vec::with_capacity(found.len());
    for f in found {
        match merged.last_mut() {
            Some(last) if f.range.start < last.range.end => {
                last.range.end = last.range.end.max(f.range.end);
            }
            _ => merged.push(f),
        }
    }
    merged
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Characters of a name: `OPENAI_API_KEY`, `x-api-key`, `db.password`.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.'
}

/// RFC 7235 token68 characters, what credentials after an auth scheme are made of.
fn is_token68_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

/// The start of the run of bytes ending at `end` for which `keep` holds.
fn run_start(bytes: &[u8], end: usize, keep: fn(u8) -> bool) -> usize {
    bytes[..end].iter().rposition(|b| !keep(*b)).map_or(0, |i| i + 1)
}

/// The end of the run of bytes starting at `start` for which `keep` holds.
fn run_end(bytes: &[u8], start: usize, keep: impl Fn(u8) -> bool) -> usize {
    bytes[start..]
        .iter()
        .position(|b| !keep(*b))
        .map_or(bytes.len(), |i| start + i)
}

/// A token: at least 8 characters, and a digit, or 20 and both cases (a word is neither).
fn looks_like_token(token: &str) -> bool {
    let has = |f: fn(&u8) -> bool| token.as_bytes().iter().any(f);
    token.len() >= 8
        && (has(u8::is_ascii_digit)
            || (token.len() >= 20 && has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase)))
}

/// Base64 of `user:password`: what `Basic` carries.
fn is_basic_credential(token: &str) -> bool {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    let decoded = STANDARD
        .decode(token)
        .or_else(|_| STANDARD_NO_PAD.decode(token.trim_end_matches('=')));
    decoded.is_ok_and(|bytes| {
        std::str::from_utf8(&bytes).is_ok_and(|text| text.contains(':') && !text.contains(char::is_control))
    })
}

/// At a blank after `Bearer` or `Basic` (a whole word, any case): the credential after it.
fn auth_scheme(text: &str, blank: usize) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    // Most blanks follow other words: one byte tells.
    if !matches!(bytes[..blank].last(), Some(b'r' | b'R' | b'c' | b'C')) {
        return None;
    }
    let word_start = run_start(bytes, blank, |b| b.is_ascii_alphabetic());
    let word = &text[word_start..blank];
    let basic = word.eq_ignore_ascii_case("basic");
    if !(basic || word.eq_ignore_ascii_case("bearer"))
        || bytes[..word_start]
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        return None;
    }
    let start = run_end(bytes, blank, is_blank);
    let end = run_end(bytes, start, is_token68_byte);
    let token = &text[start..end];
    let secret = if basic {
        is_basic_credential(token)
    } else {
        looks_like_token(token)
    };
    secret.then_some(start..end)
}

/// At the colon of `Authorization: <scheme> <credential>` → the credential (a lone token: the whole
/// value); `Cookie: a=b` → the value; `X-Api-Key: <token>` → the token.
fn header_line(bytes: &[u8], colon: usize) -> Option<Range<usize>> {
    let name_end = colon - bytes[..colon].iter().rev().take_while(|b| is_blank(**b)).count();
    // Every credential header ends in `n`, `y` or `e`: most colons (times, URLs) are rejected here.
    if !matches!(
        bytes[..name_end].last().map(u8::to_ascii_lowercase),
        Some(b'n' | b'y' | b'e')
    ) {
        return None;
    }
    let name_start = run_start(bytes, name_end, |b| b.is_ascii_alphanumeric() || b == b'-');
    let name = &bytes[name_start..name_end];
    let is = |header: &str| {
        name.len() >= header.len()
            && name[name.len() - header.len()..].eq_ignore_ascii_case(header.as_bytes())
            && (name.len() == header.len() || name[name.len() - header.len() - 1] == b'-')
    };
    let header = CREDENTIAL_HEADERS.iter().find(|h| is(h))?;
    let start = run_end(bytes, colon + 1, is_blank);
    let line_end = run_end(bytes, start, |b| !b"\r\n\"'`".contains(&b));
    let value = std::str::from_utf8(&bytes[start..line_end]).ok()?.trim_end();
    let whole = start..start + value.len();
    if *header == "cookie" {
        return value.contains('=').then_some(whole);
    }
    let authorization = *header == "authorization";
    let token_chars = |t: &str| t.bytes().all(is_token68_byte);
    let mut words = value.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(token), None, None) if token_chars(token) && token.len() >= 8 => {
            (!authorization || looks_like_token(token)).then_some(whole)
        }
        (Some(scheme), Some(credential), None)
            if authorization
                && scheme.bytes().all(|b| b.is_ascii_alphabetic())
                && token_chars(credential)
                && credential.len() >= 8 =>
        {
            Some(whole.end - credential.len()..whole.end)
        }
        _ => None,
    }
}

/// A value that is not a secret itself: empty, a variable reference (`$TOKEN`, `${TOKEN}`), a
/// placeholder (`<token>`, `***`), or a template.
fn is_placeholder(value: &str) -> bool {
    value.is_empty()
        || value.starts_with(['$', '<', '%', '{'])
        || value
            .bytes()
            .all(|b| b == b'*' || b == b'x' || b == b'X' || b == b'.')
}

/// The inside of the quoted string opening at `open` (`"` or `'`), on one line; `None` when it does
/// not close there.
fn quoted(bytes: &[u8], open: usize) -> Option<Range<usize>> {
    let quote = bytes[open];
    let mut at = open + 1;
    while let Some(&b) = bytes.get(at) {
        match b {
            b'\\' => at += 2,
            b'\r' | b'\n' => return None,
            _ if b == quote => return Some(open + 1..at),
            _ => at += 1,
        }
    }
    None
}

/// At the `=` of `NAME=value` (shell, query strings, flags) or `NAME = "value"` (a quoted literal in
/// code or a config file) → the value, inside its quotes, when NAME is credential-shaped. An
/// unquoted value after spaces is code (`key = os.environ[…]`), not a secret; `==` is a comparison.
fn assignment(text: &str, equals: usize) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    if bytes.get(equals + 1) == Some(&b'=') {
        return None;
    }
    let name_end = equals - bytes[..equals].iter().rev().take_while(|b| is_blank(**b)).count();
    let name_start = run_start(bytes, name_end, is_name_byte);
    if name_start == name_end || !is_credential_name(&text[name_start..name_end]) {
        return None;
    }
    let spaced = name_end < equals;
    let start = run_end(bytes, equals + 1, is_blank);
    let value = match bytes.get(start) {
        Some(b'"' | b'\'') => quoted(bytes, start)?,
        Some(_) if !spaced && start == equals + 1 => {
            start..run_end(bytes, start, |b| {
                !b.is_ascii_whitespace() && !b"\"'`&;,|<>(){}".contains(&b)
            })
        }
        _ => return None,
    };
    (!is_placeholder(&text[value.clone()])).then_some(value)
}

/// At the colon of `"name": "value"` (or single-quoted, as a dict prints) → the value inside its
/// quotes, when the name is credential-shaped.
fn quoted_member(text: &str, colon: usize) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    let is_space = |b: u8| b.is_ascii_whitespace();
    let close = colon - bytes[..colon].iter().rev().take_while(|b| is_space(**b)).count();
    let quote = *bytes[..close].last().filter(|b| matches!(b, b'"' | b'\''))?;
    let name_start = run_start(bytes, close - 1, is_name_byte);
    if name_start == 0 || bytes[name_start - 1] != quote {
        return None;
    }
    if !is_credential_name(&text[name_start..close - 1]) {
        return None;
    }
    let open = run_end(bytes, colon + 1, is_space);
    if !matches!(bytes.get(open), Some(b'"' | b'\'')) {
        return None;
    }
    let value = quoted(bytes, open)?;
    (!is_placeholder(&text[value.clone()])).then_some(value)
}

/// At the colon of `scheme://user:password@` → `user:password`; a lone user name (`git@`) is kept
/// unless it is a token.
fn url_userinfo(text: &str, colon: usize) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    if !bytes[colon + 1..].starts_with(b"//") {
        return None;
    }
    let scheme_start = run_start(bytes, colon, |b| b.is_ascii_alphanumeric() || b"+.-".contains(&b));
    if !bytes.get(scheme_start).is_some_and(u8::is_ascii_alphabetic) {
        return None;
    }
    let start = colon + 3;
    let end = run_end(bytes, start, |b| {
        !b.is_ascii_whitespace() && !b"/?#@\"'<>[]".contains(&b)
    });
    if bytes.get(end) != Some(&b'@') || end == start {
        return None;
    }
    let userinfo = &text[start..end];
    let secret = match userinfo.split_once(':') {
        Some((_, password)) => !password.is_empty(),
        None => userinfo.len() >= 20 && looks_like_token(userinfo),
    };
    secret.then_some(start..end)
}

/// At the colon of `name: value` that starts a line (after indentation, or a YAML list item's `- `)
/// → the value, when the name is credential-shaped and the value is one word or quoted: `password:
/// hunter2` in YAML, `secret: …` in an ini file. Prose says more after its colon (`Password: at least
/// 12 characters`), and in prose the name rarely starts the line (`the password: …`), which is what
/// keeps it; YAML's `null`, `~`, booleans, block scalars (`|`, `>`), anchors and aliases are no secret.
///
/// The text may be JSON text (a quarantined body that did not parse), where a string's line breaks
/// are the escapes `\n` and `\r` and the string ends at a closing quote: both end and start a line
/// too.
fn config_line(text: &str, colon: usize) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    // YAML needs a blank after the colon: `name:value` is a scheme, a time or a `user:password`.
    if !bytes.get(colon + 1).copied().is_some_and(is_blank) {
        return None;
    }
    let name_start = run_start(bytes, colon, is_name_byte);
    if name_start == colon || !starts_line(bytes, name_start) {
        return None;
    }
    if !is_credential_name(&text[name_start..colon]) {
        return None;
    }
    let start = run_end(bytes, colon + 1, is_blank);
    let value = match bytes.get(start) {
        Some(b'"' | b'\'') => quoted(bytes, start)?,
        Some(_) => {
            let line_end = (start..bytes.len())
                .find(|at| ends_line(bytes, *at))
                .unwrap_or(bytes.len());
            let line = &text[start..line_end];
            // A YAML or ini comment after the value is not part of it.
            let line = line.find(" #").map_or(line, |i| &line[..i]).trim_end();
            if line.contains(char::is_whitespace) {
                return None;
            }
            start..start + line.len()
        }
        None => return None,
    };
    let word = &text[value.clone()];
    let yaml_scalar = ["null", "~", "true", "false", "none"]
        .iter()
        .any(|s| word.eq_ignore_ascii_case(s));
    let yaml_syntax = word.starts_with(['|', '>', '&', '*', '!', '[', '#']);
    (!(yaml_scalar || yaml_syntax || is_placeholder(word))).then_some(value)
}

/// Whether only indentation (and a YAML list item's `- `) stands between `at` and the start of its
/// line: the text's start, a line break, an escaped one (`\n`, `\r` in JSON text), or the opening
/// quote of a JSON string.
fn starts_line(bytes: &[u8], at: usize) -> bool {
    let mut start = at - bytes[..at].iter().rev().take_while(|b| is_blank(**b)).count();
    if start > 0 && start < at && bytes[start - 1] == b'-' {
        start -= 1;
        start -= bytes[..start].iter().rev().take_while(|b| is_blank(**b)).count();
    }
    let before = &bytes[..start];
    before.is_empty()
        || matches!(before.last(), Some(b'\n' | b'\r' | b'"'))
        || before.ends_with(b"\\n")
        || before.ends_with(b"\\r")
}

/// Whether the line a config value is on ends at `at`: a line break, an escaped one, or a quote that
/// closes a JSON string (followed by `,`, `}`, `]`, `:` or the end).
fn ends_line(bytes: &[u8], at: usize) -> bool {
    match bytes[at] {
        b'\n' | b'\r' => true,
        b'\\' => matches!(bytes.get(at + 1), Some(b'n' | b'r')),
        b'"' => matches!(bytes.get(at + 1), None | Some(b',' | b'}' | b']' | b':')),
        _ => false,
    }
}

/// True for names of values that are credentials whole, however the name is written:
/// `password`, `db_password`, `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `clientSecret`, `GITHUB_TOKEN`,
/// `x-api-key`, `authorization`, `cookie`, `credentials`. Not `max_tokens`, `token_count`,
/// `page_token` (a pagination cursor), `eos_token` (a tokenizer's), `sort_key`, `primary_key`,
/// `credential_refs`, `password_policy`, `pwd` (a working directory).
///
/// The name is read as its letters and digits, lowercased, and judged by how it ends: the words of a
/// name come in any case and any separator, and the last word says what the value is.
pub fn is_credential_name(name: &str) -> bool {
    // The last 24 letters and digits, lowercased, reversed (enough for every suffix below).
    let mut tail = [0u8; 24];
    let mut len = 0;
    for b in name.bytes().rev().filter(u8::is_ascii_alphanumeric) {
        if len == tail.len() {
            break;
        }
        tail[len] = b.to_ascii_lowercase();
        len += 1;
    }
    let tail = &tail[..len];
    let ends_with =
        |suffix: &&str| suffix.len() <= tail.len() && suffix.bytes().rev().zip(tail).all(|(a, b)| a == *b);
    // By the last letter first: most names end in none of these words, and are rejected at once.
    let (credentials, not_credentials): (&[&str], &[&str]) = match tail.first() {
        Some(b'd') => (&["password", "passwd"], &[]),
        Some(b's') => (
            &["passwords", "secrets", "apikeys", "credentials", "cookies"],
            &[],
        ),
        Some(b'e') => (&["passphrase", "cookie"], &[]),
        Some(b't') => (&["secret"], &[]),
        Some(b'y') => (
            &[
                "apikey",
                "accesskey",
                "secretkey",
                "privatekey",
                "signingkey",
                "encryptionkey",
            ],
            &[],
        ),
        Some(b'l') => (&["credential"], &[]),
        // Tokens that are not credentials: pagination cursors and a tokenizer's special tokens.
        Some(b'n') => (
            &["authorization", "token"],
            &[
                "nexttoken",
                "pagetoken",
                "continuationtoken",
                "cursortoken",
                "paginationtoken",
                "synctoken",
                "eostoken",
                "bostoken",
                "padtoken",
                "unktoken",
                "septoken",
                "clstoken",
                "masktoken",
                "stoptoken",
                "starttoken",
                "endtoken",
            ],
        ),
        _ => return false,
    };
    credentials.iter().any(ends_with) && !not_credentials.iter().any(ends_with)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes(text: &str) -> Vec<(Shape, &str)> {
        find(text)
            .into_iter()
            .map(|f| (f.shape, &text[f.range]))
            .collect()
    }

    #[test]
    fn names() {
        for yes in [
            "password",
            "db_password",
            "OPENAI_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "clientSecret",
            "GITHUB_TOKEN",
            "x-api-key",
            "apiKey",
            "Authorization",
            "PGPASSWORD",
            "--password",
            "credentials",
            "access_token",
        ] {
            assert!(is_credential_name(yes), "{yes}");
        }
        for no in [
            "max_tokens",
            "token_count",
            "tokens",
            "page_token",
            "nextToken",
            "eos_token",
            "sort_key",
            "primary_key",
            "key",
            "credential_refs",
            "password_policy",
            "pwd",
            "session_id",
            "tokenizer",
            "",
        ] {
            assert!(!is_credential_name(no), "{no}");
        }
    }

    #[test]
    fn each_detector_finds_only_the_secret() {
        assert_eq!(
            shapes("curl -H 'Authorization: Bearer abc123def456ghi' https://api.example.com"),
            vec![(Shape::HeaderLine, "abc123def456ghi")]
        );
        assert_eq!(
            shapes("send Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig please"),
            vec![(Shape::AuthScheme, "eyJhbGciOiJIUzI1NiJ9.e30.sig")]
        );
        assert_eq!(
            shapes("Basic dXNlcjpodW50ZXIy"),
            vec![(Shape::AuthScheme, "dXNlcjpodW50ZXIy")]
        );
        assert_eq!(
            shapes("API_KEY=s3cr3t-value ./deploy.sh"),
            vec![(Shape::Assignment, "s3cr3t-value")]
        );
        assert_eq!(
            shapes("GET https://api.example.com/v1?q=cats&api_key=abcd1234&page=2"),
            vec![(Shape::Assignment, "abcd1234")]
        );
        assert_eq!(
            shapes(r#"cfg = {"db_password": "hunter2", "host": "db"}"#),
            vec![(Shape::QuotedMember, "hunter2")]
        );
        assert_eq!(
            shapes("git clone https://deploy:pa55word@git.example.com/repo.git"),
            vec![(Shape::UrlUserinfo, "deploy:pa55word")]
        );
        assert_eq!(
            shapes("token ghp_0123456789abcdefghijABCDEFGHIJklmnop in the log"),
            vec![(Shape::KnownPrefix, "ghp_0123456789abcdefghijABCDEFGHIJklmnop")]
        );
        assert_eq!(
            shapes("db:\n  host: db.internal\n  password: hunter2\n  port: 5432"),
            vec![(Shape::ConfigLine, "hunter2")]
        );
        assert_eq!(
            shapes("[client]\nSecret: s3cr3t-Value # rotated monthly\r\nuser: ci"),
            vec![(Shape::ConfigLine, "s3cr3t-Value")]
        );
        assert_eq!(
            shapes("tokens:\n  - token: 'tok en'\napi_key: \"k-123\""),
            vec![(Shape::ConfigLine, "tok en"), (Shape::ConfigLine, "k-123")]
        );
        assert_eq!(shapes("password: hunter2"), vec![(Shape::ConfigLine, "hunter2")]);
        // The same in JSON text, where a string's line breaks are escapes.
        assert_eq!(
            shapes(
                r#"{"config":"db:\n  password: yamlPassw0rd-42\n  port: 5432","x":"- token: t0k3n-value"}"#
            ),
            vec![
                (Shape::ConfigLine, "yamlPassw0rd-42"),
                (Shape::ConfigLine, "t0k3n-value")
            ]
        );
        let pem = "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(
            shapes(pem),
            vec![(
                Shape::PrivateKey,
                "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----"
            )]
        );
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in [
            "Bearer tokens expire hourly; Bearer authentication is required",
            "Basic usage: call the tool with a path",
            "the token limit is 4096 and the password must be rotated",
            "max_tokens=1024 temperature=0.2 key=value page_token=abc123",
            "https://example.com/path?q=1&sort=asc",
            "ssh://git@github.com/acme/widgets.git",
            "postgres://analytics@replica:5432/shop",
            "commit 3f786850e387550fdab836ed7e6dc881de23001b",
            "id 123e4567-e89b-12d3-a456-426614174000",
            "API_KEY=$API_KEY ./deploy.sh",
            "api_key = os.environ['API_KEY']",
            "if token == expected: return",
            "Authorization: required for every call",
            "Password: at least 12 characters",
            "the password field is required",
            "note: the password is rotated daily",
            "password:\n  min_length: 12",
            "password: null\ntoken: ~\nsecret: true\napi_key: ''",
            "password: |\n  multi",
            "max_tokens: 1024\npage_token: abc123\nsort_key: name",
            "see the secret: it is in the vault",
            "token: $GITHUB_TOKEN\npassword: <password>\nsecret: ***",
            "at 09:00: token: rotated",
        ] {
            assert_eq!(shapes(text), vec![], "{text}");
        }
    }

    #[test]
    fn markers_already_there_are_not_found_again() {
        let text = "API_KEY=[scrubbed:hmac-sha256:0123456789abcdef] Authorization: Bearer [scrubbed:hmac-sha256:0123456789abcdef]";
        assert_eq!(shapes(text), vec![]);
    }
}
