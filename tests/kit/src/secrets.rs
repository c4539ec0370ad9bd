//! The secret-shape corpus of issue 28: every shape a producer was found to leak through, in one
//! event, and ordinary text that names credentials without holding one, in another. Ingest's scrub
//! tests run it through the scrubber and the real pipeline; the end-to-end test runs it through
//! `toolledger up` and an export and looks for the secrets in logs, the projection and Parquet.

use serde_json::{Value, json};

/// An event that carries secrets, and the secrets alone.
#[derive(Debug, Clone)]
pub struct SecretShapes {
    /// A `tool.invocation.planned` event of tenant `acme` (structured CloudEvent JSON).
    pub event: Value,
    /// Each secret the event carries, exactly as sent: none may be found after scrubbing.
    pub secrets: Vec<&'static str>,
}

/// Every secret shape of issue 28 in one `tool.invocation.planned` event of tenant `acme`
/// (invocation `inv-9`, session `sess-9`), with ordinary text beside each: the source's userinfo,
/// credential-named extensions, a query parameter, a `curl -H 'Authorization: …'` command, an
/// environment assignment, `env` and header objects, an undeclared `password`, `export
/// GITHUB_TOKEN=…` in a log, and a YAML `password:` line.
pub fn shapes_event() -> SecretShapes {
    let event = json!({"specversion": "1.0", "id": "ev-shapes", "type": "tool.invocation.planned",
        "source": "https://ci-bot:s0urcePassw0rd@ci.example.com/jobs/42", "tenant": "acme",
        "subject": "inv-9", "invocationid": "inv-9", "toolid": "shell.run", "sessionid": "sess-9",
        "authorization": "Bearer extTok3n-ABCDEF0123456789", "apikey": "apikey-0123456789abcdef",
        "partitionkey": "user-42",
        "data": {"schema_version": "0.2.0", "invocation_id": "inv-9", "tool_id": "shell.run",
            "session_id": "sess-9", "status": "planned", "created_at": "2026-05-08T09:00:00Z",
            "model_input": {
                "url": "https://api.example.com/v1/items?limit=10&api_key=qK3yAPIsecret99&sort=asc",
                "command": "curl -sS -H 'Authorization: Bearer curlTok3n0123456789' https://billing.example.com/v1/refunds",
                "deploy": "API_KEY=dep1oyKEYvalue77 ./deploy.sh --prod",
                "env": {"OPENAI_API_KEY": "sk-proj-0penAIkey0123456789abcdef",
                    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "RUST_LOG": "info"},
                "login": {"user": "ann", "password": "hunter2-undeclared"},
                "requestHeaders": {"Authorization": "Basic Y2ktYm90OmJhc2ljUGFzczEyMw==",
                    "Accept": "application/json"},
                "log": "setting up\nexport GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJklmnop\ndone",
                "config": "db:\n  host: db.internal\n  password: yamlPassw0rd-42\n  port: 5432"}}});
    SecretShapes {
        event,
        secrets: vec![
            "s0urcePassw0rd",
            "extTok3n-ABCDEF0123456789",
            "apikey-0123456789abcdef",
            "qK3yAPIsecret99",
            "curlTok3n0123456789",
            "dep1oyKEYvalue77",
            "sk-proj-0penAIkey0123456789abcdef",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "hunter2-undeclared",
            "Y2ktYm90OmJhc2ljUGFzczEyMw==",
            "ghp_0123456789abcdefghijABCDEFGHIJklmnop",
            "yamlPassw0rd-42",
        ],
    }
}

/// The JSON Pointers scrubbing lists for [`shapes_event`], in the scrubber's order.
pub const SHAPES_SCRUBBED_PATHS: &[&str] = &[
    "/apikey",
    "/authorization",
    "/data/model_input/command",
    "/data/model_input/config",
    "/data/model_input/deploy",
    "/data/model_input/env/AWS_SECRET_ACCESS_KEY",
    "/data/model_input/env/OPENAI_API_KEY",
    "/data/model_input/log",
    "/data/model_input/login/password",
    "/data/model_input/requestHeaders/Authorization",
    "/data/model_input/url",
    "/source",
];

/// Ordinary text that names credentials without holding one, in every place a shape could be: a
/// `tool.invocation.planned` event of tenant `acme` (invocation `inv-8`) that scrubbing must leave
/// exactly as it is.
pub fn ordinary_event() -> Value {
    json!({"specversion": "1.0", "id": "ev-ordinary", "type": "tool.invocation.planned",
        "source": "https://ci.example.com/jobs/42", "tenant": "acme", "subject": "inv-8",
        "invocationid": "inv-8", "toolid": "shell.run", "partitionkey": "user-42", "region": "eu",
        "data": {"schema_version": "0.2.0", "invocation_id": "inv-8", "tool_id": "shell.run",
            "status": "planned", "created_at": "2026-05-08T09:00:00Z",
            "model_input": {
                "prose": "Rotate the token before it expires; the password policy needs 12 characters.",
                "bearer": "The Bearer scheme is in RFC 6750; Bearer tokens are opaque to clients.",
                "basic": "Basic usage: call the tool with a path",
                "docs": "See https://docs.example.com/guide?section=auth&page=2 for details",
                "pairs": "region=eu-west-1 mode=fast max_tokens=512 key=value page_token=abc123",
                "sha": "commit 3f786850e387550fdab836ed7e6dc881de23001b",
                "uuid": "123e4567-e89b-12d3-a456-426614174000",
                "image": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
                "dsn": "postgres://analytics@replica:5432/shop",
                "clone": "git clone ssh://git@github.com/acme/widgets.git",
                "env_ref": "API_KEY=$API_KEY ./deploy.sh",
                "form": "the password field is required",
                "yaml": "password:\n  min_length: 12\ntoken: null\nmax_tokens: 512\nPassword: at least 12 characters",
                "max_tokens": 1024, "token_count": 37, "has_password": true, "password_hint": "",
                "schema": {"properties": {"api_key": {"type": "string"}, "password": {"type": "string"}}}}}})
}

/// The strings of [`ordinary_event`]'s `model_input` that must come out of every store exactly as
/// they went in.
pub fn ordinary_texts() -> Vec<String> {
    ordinary_event()["data"]["model_input"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, value)| value.as_str().map(str::to_owned))
        .collect()
}
