//! The web view: static assets compiled into the binary and served beside the `/v1` API.
//!
//! ```text
//! GET /             ─▶ index.html            (no token: assets carry no ledger data)
//! GET /ui/{file}    ─▶ app.js, modules, css   (ETag = SHA-256 of the bytes; 304 on If-None-Match)
//! the page         ─▶ fetch /v1/... with the bearer token the user signed in with
//! ```
//!
//! The page is plain ES modules, CSS and hand-written SVG from `query/web/` (no bundler, so
//! the build is the Rust build). Every response carries a strict Content-Security-Policy: scripts,
//! styles and connections from this origin only, no inline script, no framing.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// The policy every asset is served with: nothing but this origin, no inline script, no plugins,
/// no framing. Inline style attributes are not needed either (styles are set through the CSSOM).
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     frame-ancestors 'none'; form-action 'self'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_str!(concat!("../web/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("sessions.js", JS),
    asset!("session.js", JS),
    asset!("invocation.js", JS),
    asset!("verify.js", JS),
    asset!("tools.js", JS),
    asset!("charts.js", JS),
    asset!("settings.js", JS),
    asset!("favicon.svg", "image/svg+xml"),
];

/// Each asset's ETag, computed once: a quoted SHA-256 prefix of its bytes.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let digest = Sha256::digest(a.body.as_bytes());
            let hex = toolledger_wire::entry::hex(&digest[..16]);
            format!("\"{hex}\"")
        })
        .collect()
});

/// `GET /`: the page.
pub(crate) async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /ui/{file}`: a script, stylesheet or icon.
pub(crate) async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    serve(&file, &headers)
}

fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some(at) = ASSETS.iter().position(|a| a.name == name) else {
        let mut response = (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "no such asset\n",
        )
            .into_response();
        secure(response.headers_mut());
        return response;
    };
    let asset = &ASSETS[at];
    let etag = &ETAGS[at];
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, asset.content_type)],
            asset.body,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    // Not fingerprinted names: the browser revalidates every time (a 304 costs one round trip).
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(headers);
    response
}

fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        for asset in ASSETS
            .iter()
            .filter(|a| a.content_type == JS || a.name == "index.html")
        {
            for line in asset.body.lines() {
                for quoted in line
                    .split(['\'', '"'])
                    .filter(|s| s.starts_with("./") || s.starts_with("/ui/"))
                {
                    let file = quoted.trim_start_matches("./").trim_start_matches("/ui/");
                    assert!(
                        names.contains(&file),
                        "{} refers to {file}, which is not embedded",
                        asset.name
                    );
                }
            }
        }
    }

    #[test]
    fn no_asset_writes_data_as_html() {
        for asset in ASSETS.iter().filter(|a| a.content_type == JS) {
            for bad in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!asset.body.contains(bad), "{} uses {bad}", asset.name);
            }
        }
    }
}
