//! How fast records are mapped (and each event validated), against a baseline measured in the same
//! run: reading the same file's records without mapping them.
//!
//! `cargo run --release -p toolledger-import --example import_throughput [CALLS]`
//!
//! Prints records/s and events/s for an MCP log of CALLS parallel-ish `tools/call` request/response
//! pairs, median of 3 runs with the spread, and the ratio to the read-only baseline.

use std::time::Instant;

use toolledger_import::{Format, Options, map_file};

fn mcp_log(calls: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..calls {
        out.push_str(&format!(
            r#"{{"mcp_session_id":"s-1","message":{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"get_weather","arguments":{{"location":"city {i}"}}}}}}}}"#
        ));
        out.push('\n');
        out.push_str(&format!(
            r#"{{"mcp_session_id":"s-1","message":{{"jsonrpc":"2.0","id":{i},"result":{{"content":[{{"type":"text","text":"sunny"}}],"structuredContent":{{"t":{i}}},"isError":false}}}}}}"#
        ));
        out.push('\n');
    }
    out.into_bytes()
}

fn median_and_spread(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let spread = samples[samples.len() - 1] - samples[0];
    (samples[samples.len() / 2], spread)
}

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5_000);
    let bytes = mcp_log(calls);
    let records = calls * 2;
    let options = Options::new("bench");
    let mut baseline = Vec::new();
    let mut mapped = Vec::new();
    let mut events = 0;
    for _ in 0..3 {
        let started = Instant::now();
        let read = toolledger_wire::produce::read_events("bench", &bytes);
        assert_eq!(read.len(), records);
        baseline.push(records as f64 / started.elapsed().as_secs_f64());

        let started = Instant::now();
        let outcomes = map_file(Format::Mcp, &options, "bench", &bytes).expect("valid options");
        let secs = started.elapsed().as_secs_f64();
        assert!(outcomes.iter().all(|o| o.is_ok()));
        events = outcomes.iter().map(|o| o.events.len()).sum::<usize>();
        mapped.push(records as f64 / secs);
    }
    let (base, base_spread) = median_and_spread(baseline);
    let (map, map_spread) = median_and_spread(mapped);
    println!("import throughput: {calls} MCP calls = {records} records, {events} events per run, 3 runs");
    println!("  read only (baseline): {base:>10.0} records/s (spread {base_spread:.0})");
    println!(
        "  map + validate:       {map:>10.0} records/s (spread {map_spread:.0}), {:.0} events/s",
        map * events as f64 / records as f64
    );
    println!("  ratio map/baseline:   {:.3}", map / base);
}
