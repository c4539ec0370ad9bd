//! Connecting to NATS the way every toolledger process does.
//!
//! async-nats 0.51 ignores credentials written into a URL, and the shipped server configurations
//! (`deploy/nats`) let each identity subscribe only under `_INBOX.<user>.>`, so that one tenant's
//! client cannot read another's replies. Every toolledger connection therefore goes through
//! [`options`]: user and password from the URL (percent-decoded), and the matching inbox prefix.
//! A URL may list several servers of a cluster separated by commas
//! (`nats://u:p@host1:4222,nats://u:p@host2:4222`), so a process can connect, and a new session
//! reconnect, while any one node is down; the credentials are taken from the first server that has them.

use async_nats::{ConnectOptions, ServerAddr};

use crate::{Error, Result};

/// The server address and connect options for `url` (`nats://user:password@host:port`), named
/// `name` in the server's connection list.
pub fn options(url: &str, name: &str) -> Result<(Vec<ServerAddr>, ConnectOptions)> {
    let addrs = url
        .split(',')
        .map(|server| {
            server
                .trim()
                .parse::<ServerAddr>()
                .map_err(|e| Error::jetstream(format!("parse NATS URL {}", redacted(url)), e))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut options = ConnectOptions::new().name(name);
    if let Some(addr) = addrs.iter().find(|a| a.username().is_some())
        && let Some(user) = addr.username()
    {
        let user = percent_decode(user);
        let password = addr.password().map(percent_decode).unwrap_or_default();
        options = options
            .custom_inbox_prefix(format!("_INBOX.{user}"))
            .user_and_password(user, password);
    }
    Ok((addrs, options))
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
    url.split(',')
        .map(|server| match server.trim().parse::<ServerAddr>() {
            Ok(addr) if addr.password().is_some() => {
                let user = addr.username().unwrap_or_default();
                format!("{}://{user}:***@{}:{}", addr.scheme(), addr.host(), addr.port())
            }
            // Unparsable text may still hold a password: show only what follows the last `@`.
            _ => match server.rsplit_once('@') {
                Some((_, host)) => format!("***@{host}"),
                None => server.to_owned(),
            },
        })
        .collect::<Vec<_>>()
        .join(",")
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
        assert_eq!(
            redacted("nats://ingest:pw@127.0.0.1:4231,nats://ingest:pw@127.0.0.1:4232"),
            "nats://ingest:***@127.0.0.1:4231,nats://ingest:***@127.0.0.1:4232"
        );
    }

    #[test]
    fn a_url_may_list_every_server_of_a_cluster() {
        let (addrs, _) = options(
            "nats://127.0.0.1:4231, nats://127.0.0.1:4232,nats://127.0.0.1:4233",
            "t",
        )
        .unwrap();
        let ports: Vec<u16> = addrs.iter().map(ServerAddr::port).collect();
        assert_eq!(ports, [4231, 4232, 4233]);
        assert!(options("nats://127.0.0.1:4231,nats://127.0.0.1:x", "t").is_err());
    }
}
