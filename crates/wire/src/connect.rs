//! Connecting to NATS the way every toolledger process does.
//!
//! async-nats 0.51 ignores credentials written into a URL, and the shipped server configurations
//! (`deploy/nats`) let each identity subscribe only under `_INBOX.<user>.>`, so that one tenant's
//! client cannot read another's replies. Every toolledger connection therefore goes through
//! [`options`]: user and password from the URL (percent-decoded), and the matching inbox prefix.

use async_nats::{ConnectOptions, ServerAddr};

use crate::{Error, Result};

/// The server address and connect options for `url` (`nats://user:password@host:port`), named
/// `name` in the server's connection list.
pub fn options(url: &str, name: &str) -> Result<(ServerAddr, ConnectOptions)> {
    let addr: ServerAddr = url
        .parse()
        .map_err(|e| Error::jetstream(format!("parse NATS URL {}", redacted(url)), e))?;
    let mut options = ConnectOptions::new().name(name);
    if let Some(user) = addr.username() {
        let user = percent_decode(user);
        let password = addr.password().map(percent_decode).unwrap_or_default();
        options = options
            .custom_inbox_prefix(format!("_INBOX.{user}"))
            .user_and_password(user, password);
    }
    Ok((addr, options))
}

/// Connects to `url` with [`options`].
pub async fn connect(url: &str, name: &str) -> Result<async_nats::Client> {
    let (addr, options) = options(url, name)?;
    options
        .connect(addr)
        .await
        .map_err(|e| Error::jetstream(format!("connect to NATS at {}", redacted(url)), e))
}

/// `url` with its password replaced by `***`, for messages and logs.
pub fn redacted(url: &str) -> String {
    match url.parse::<ServerAddr>() {
        Ok(addr) if addr.password().is_some() => {
            let user = addr.username().unwrap_or_default();
            format!("{}://{user}:***@{}:{}", addr.scheme(), addr.host(), addr.port())
        }
        _ => url.to_owned(),
    }
}

fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redacted("nats://ingest:s3cr%40t@127.0.0.1:4222"),
            "nats://ingest:***@127.0.0.1:4222"
        );
        assert_eq!(redacted("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert!(options("nats://ingest:pw@127.0.0.1:4222", "t").is_ok());
    }
}
