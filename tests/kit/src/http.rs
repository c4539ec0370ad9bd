use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response from [`http_get`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl HttpResponse {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// GETs `path` from `addr` with `Connection: close` and reads the whole response.
/// Handles the plain and chunked bodies a small server sends.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<HttpResponse> {
    get(addr, path, "")
}

/// [`http_get`] with `Authorization: Bearer <token>`.
pub fn http_get_as(addr: SocketAddr, path: &str, token: &str) -> std::io::Result<HttpResponse> {
    get(addr, path, &format!("Authorization: Bearer {token}\r\n"))
}

/// POSTs a JSON `body` to `path`, with `Authorization: Bearer <token>` when a token is given, and
/// reads the whole response.
pub fn http_post(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> std::io::Result<HttpResponse> {
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    request(
        addr,
        &format!("POST {path}"),
        &format!(
            "{auth}Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ),
        body,
    )
}

fn get(addr: SocketAddr, path: &str, extra_headers: &str) -> std::io::Result<HttpResponse> {
    request(addr, &format!("GET {path}"), extra_headers, "")
}

fn request(addr: SocketAddr, line: &str, extra_headers: &str, body: &str) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{line} HTTP/1.1\r\nHost: {addr}\r\n{extra_headers}Connection: close\r\n\r\n{body}"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| bad("no header end"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body).ok_or_else(|| bad("bad chunked body"))?
    } else {
        body.to_owned()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}
