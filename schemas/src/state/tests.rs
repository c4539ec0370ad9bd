//! The state machine's rules, one test each, and properties over arbitrary event sequences.

use super::*;
use crate::model::ToolInvocation;
use proptest::prelude::*;

const T0: i64 = 1_778_198_400; // 2026-05-08T00:00:00Z

fn at(seconds: i64) -> Option<EventTime> {
    Some(EventTime((T0 + seconds) * 1_000_000_000))
}

/// An event of `class` whose data agrees with it (status = the class's state, where it has one).
fn ev(class: EventClass) -> EventFacts {
    let mut facts = EventFacts::new(class, 0);
    if contract(class).data == DataObject::Invocation {
        let state = target_state(&facts).unwrap_or(InvocationState::Unknown);
        facts.invocation_status = Some(InvocationStatus::from_wire(state.as_str()));
    }
    facts
}

fn with_status(class: EventClass, status: &str) -> EventFacts {
    EventFacts {
        invocation_status: Some(InvocationStatus::from_wire(status)),
        ..EventFacts::new(class, 0)
    }
}

fn decided(behavior: PermissionBehavior) -> EventFacts {
    EventFacts {
        behavior: Some(behavior),
        ..EventFacts::new(EventClass::PermissionDecided, 0)
    }
}

fn result(id: &str, status: ResultStatus) -> EventFacts {
    EventFacts {
        result_id: Some(id.to_owned()),
        result_status: Some(status),
        ..EventFacts::new(EventClass::ResultCreated, 0)
    }
}

/// Runs events with sequence numbers 1.., returning the final track and all anomalies.
fn run(events: &[EventFacts]) -> (InvocationTrack, Vec<Anomaly>) {
    let numbered: Vec<EventFacts> = events
        .iter()
        .enumerate()
        .map(|(i, e)| EventFacts {
            seq: i as u64 + 1,
            ..e.clone()
        })
        .collect();
    replay(&numbered, &Config::default())
}

fn kinds(anomalies: &[Anomaly]) -> Vec<AnomalyKind> {
    anomalies.iter().map(Anomaly::kind).collect()
}

use EventClass as C;
use InvocationState as S;

#[test]
fn a_full_lifecycle_is_clean() {
    let events = [
        ev(C::InvocationPlanned),
        ev(C::InvocationSelected),
        ev(C::InvocationArgumentsReady),
        ev(C::HookPreStarted),
        ev(C::HookPreCompleted),
        ev(C::PermissionRequested),
        decided(PermissionBehavior::Allow),
        ev(C::InvocationQueued),
        ev(C::InvocationStarted),
        EventFacts {
            progress_status: Some(ProgressStatus::Running),
            ..ev(C::InvocationProgress)
        },
        ev(C::InvocationPartialResult),
        ev(C::HookPostStarted),
        ev(C::HookPostCompleted),
        ev(C::InvocationSucceeded),
        result("r1", ResultStatus::Succeeded),
        ev(C::ResultPersisted),
        ev(C::ResultRedacted),
    ];
    let (track, anomalies) = run(&events);
    assert_eq!(anomalies, []);
    assert_eq!(track.state, S::Succeeded);
    assert!(track.is_terminal());
    assert_eq!(track.result_id.as_deref(), Some("r1"));
    assert_eq!(track.events, events.len() as u64);
    assert_eq!(track.last_seq, Some(events.len() as u64));
}

#[test]
fn status_mismatch_keeps_the_class_state() {
    let (track, anomalies) = run(&[
        ev(C::InvocationPlanned),
        with_status(C::InvocationStarted, "queued"),
    ]);
    assert_eq!(
        anomalies,
        [Anomaly::StatusMismatch {
            status: "queued".into(),
            class_state: S::Running
        }]
    );
    assert_eq!(track.state, S::Running, "the class wins");
}

#[test]
fn progress_and_result_statuses_are_not_compared() {
    let progress = EventFacts {
        progress_status: Some(ProgressStatus::Completed),
        ..ev(C::InvocationProgress)
    };
    let partial = EventFacts {
        result_status: Some(ResultStatus::Succeeded),
        ..ev(C::InvocationPartialResult)
    };
    let (_, anomalies) = run(&[
        ev(C::InvocationPlanned),
        ev(C::InvocationStarted),
        progress,
        partial,
    ]);
    assert_eq!(anomalies, []);
}

#[test]
fn arguments_ready_becomes_schema_parse_failed_when_the_data_says_so() {
    let step1 = with_status(C::InvocationArgumentsReady, "schema_parse_failed");
    let (track, anomalies) = run(&[ev(C::InvocationPlanned), step1.clone()]);
    assert_eq!((track.state, anomalies), (S::SchemaParseFailed, vec![]));
    let (track, anomalies) = run(&[ev(C::InvocationPlanned), step1, ev(C::InvocationValidationFailed)]);
    assert_eq!((track.state, anomalies), (S::ValidationFailed, vec![]));
}

#[test]
fn events_after_terminal_are_flagged_and_the_state_sticks() {
    let (track, anomalies) = run(&[
        ev(C::InvocationPlanned),
        ev(C::InvocationSucceeded),
        ev(C::InvocationStarted),
    ]);
    assert_eq!(
        anomalies,
        [Anomaly::EventAfterTerminal {
            terminal: S::Succeeded
        }]
    );
    assert_eq!(track.state, S::Succeeded);
    // Progress and permission decisions drive the lifecycle too.
    let (_, anomalies) = run(&[
        ev(C::InvocationPlanned),
        ev(C::InvocationFailed),
        ev(C::InvocationProgress),
        decided(PermissionBehavior::Passthrough),
    ]);
    assert_eq!(
        kinds(&anomalies),
        [AnomalyKind::EventAfterTerminal, AnomalyKind::EventAfterTerminal]
    );
}

#[test]
fn results_after_terminal_are_expected() {
    // The spec emits the terminal result after the terminal state, and denial as a normal result.
    let (track, anomalies) = run(&[
        ev(C::InvocationPlanned),
        decided(PermissionBehavior::Deny),
        result("r1", ResultStatus::Denied),
        ev(C::ResultPersisted),
    ]);
    assert_eq!((track.state, anomalies), (S::Denied, vec![]));
    // But a denied result contradicting a success is flagged.
    let (track, anomalies) = run(&[
        ev(C::InvocationPlanned),
        ev(C::InvocationSucceeded),
        result("r1", ResultStatus::Denied),
    ]);
    assert_eq!(track.state, S::Succeeded);
    assert_eq!(
        anomalies,
        [Anomaly::EventAfterTerminal {
            terminal: S::Succeeded
        }]
    );
}

#[test]
fn moving_backwards_is_illegal_and_does_not_move() {
    let (track, anomalies) = run(&[
        ev(C::InvocationPlanned),
        ev(C::InvocationStarted),
        ev(C::InvocationQueued),
    ]);
    assert_eq!(
        anomalies,
        [Anomaly::IllegalTransition {
            from: S::Running,
            to: S::Queued
        }]
    );
    assert_eq!(track.state, S::Running);
    let (_, anomalies) = run(&[
        ev(C::InvocationPlanned),
        ev(C::HookPostStarted),
        ev(C::InvocationStarted),
    ]);
    assert_eq!(
        anomalies,
        [Anomaly::IllegalTransition {
            from: S::PostHooksRunning,
            to: S::Running
        }]
    );
    let (_, anomalies) = run(&[
        ev(C::InvocationPlanned),
        decided(PermissionBehavior::Allow),
        decided(PermissionBehavior::Ask),
    ]);
    assert_eq!(
        anomalies,
        [Anomaly::IllegalTransition {
            from: S::Approved,
            to: S::AwaitingApproval
        }]
    );
}

#[test]
fn skipping_and_resuming_are_legal() {
    let needs_input = EventFacts {
        progress_status: Some(ProgressStatus::NeedsInput),
        ..ev(C::InvocationProgress)
    };
    let waiting = EventFacts {
        progress_status: Some(ProgressStatus::WaitingForInput),
        ..ev(C::InvocationProgress)
    };
    let (track, anomalies) = run(&[
        ev(C::InvocationPlanned),
        ev(C::InvocationStarted), // skips selected … queued
        needs_input,
        ev(C::InvocationStarted),
        ev(C::InvocationYielded),
        ev(C::InvocationStarted),
        ev(C::InvocationPartialResult),
        ev(C::InvocationStarted),
        waiting,
        ev(C::InvocationTimedOut),
    ]);
    assert_eq!((track.state, anomalies), (S::TimedOut, vec![]));
}

#[test]
fn permission_behaviors_move_as_the_table_says() {
    for (behavior, state) in [
        (PermissionBehavior::Allow, S::Approved),
        (PermissionBehavior::Ask, S::AwaitingApproval),
        (PermissionBehavior::Deny, S::Denied),
        (PermissionBehavior::Passthrough, S::PreHooksRunning),
    ] {
        let (track, anomalies) = run(&[
            ev(C::InvocationPlanned),
            ev(C::HookPreCompleted),
            decided(behavior),
        ]);
        assert_eq!((track.state, anomalies), (state, vec![]), "{behavior}");
    }
    let (track, _) = run(&[ev(C::InvocationPlanned), ev(C::PermissionRequested)]);
    assert_eq!(track.state, S::AwaitingApproval);
}

#[test]
fn a_pre_hook_stop_blocks_and_a_post_hook_stop_does_not() {
    let stop = |class| EventFacts {
        hook_stop: true,
        ..ev(class)
    };
    let (track, _) = run(&[ev(C::InvocationPlanned), stop(C::HookPreCompleted)]);
    assert_eq!(track.state, S::Blocked);
    let (track, _) = run(&[ev(C::InvocationPlanned), stop(C::HookPostCompleted)]);
    assert_eq!(track.state, S::PostHooksRunning);
}

#[test]
fn orphans_wait_in_unknown_until_planned() {
    let (track, anomalies) = run(&[ev(C::InvocationStarted), ev(C::InvocationSucceeded)]);
    assert_eq!(anomalies, [Anomaly::OrphanEvent, Anomaly::OrphanEvent]);
    assert_eq!(track.state, S::Unknown);
    assert!(!track.planned);
    let (track, anomalies) = run(&[
        ev(C::InvocationStarted),
        ev(C::InvocationPlanned),
        ev(C::InvocationStarted),
    ]);
    assert_eq!(anomalies, [Anomaly::OrphanEvent]);
    assert_eq!(track.state, S::Running);
}

#[test]
fn out_of_order_uses_the_latest_time_and_the_skew() {
    let timed = |class, seconds| EventFacts {
        time: at(seconds),
        ..ev(class)
    };
    let (track, anomalies) = run(&[
        timed(C::InvocationPlanned, 10),
        timed(C::InvocationSelected, 20),
        timed(C::InvocationArgumentsReady, 16), // 4 s early: within the skew
        timed(C::InvocationQueued, 14),         // 6 s early: out of order
    ]);
    assert_eq!(
        anomalies,
        [Anomaly::OutOfOrder {
            time: at(14).expect("time"),
            latest: at(20).expect("time")
        }]
    );
    assert_eq!(track.latest_time, at(20));
    assert_eq!(track.state, S::Queued, "out of order is recorded, not refused");

    let strict = Config {
        out_of_order_skew: Duration::ZERO,
    };
    let outcome = step(&track, &timed(C::InvocationStarted, 19), &strict);
    assert_eq!(kinds(&outcome.anomalies), [AnomalyKind::OutOfOrder]);
    let outcome = step(
        &track,
        &EventFacts {
            time: None,
            ..ev(C::InvocationStarted)
        },
        &strict,
    );
    assert_eq!(outcome.anomalies, [], "no time, nothing to compare");
}

#[test]
fn unknown_values_are_reported_and_an_unknown_status_also_mismatches() {
    let data: ToolInvocation =
        serde_json::from_str(include_str!("../model/samples/invocation.unknown-status.json")).expect("JSON");
    let facts = EventFacts::from_data(C::InvocationStarted, 2, None, &Data::Invocation(Box::new(data)));
    let (_, anomalies) = run(&[ev(C::InvocationPlanned), facts]);
    assert_eq!(
        kinds(&anomalies),
        [AnomalyKind::UnknownValue, AnomalyKind::StatusMismatch]
    );
    let Anomaly::UnknownValue(unknown) = &anomalies[0] else {
        panic!("not an unknown value")
    };
    assert_eq!(
        (unknown.path.as_str(), unknown.value.as_str()),
        ("/status", "warming_up")
    );
}

#[test]
fn a_second_result_with_another_id_is_a_duplicate() {
    let (track, anomalies) = run(&[
        ev(C::InvocationPlanned),
        result("r1", ResultStatus::Succeeded),
        result("r1", ResultStatus::Succeeded),
        result("r2", ResultStatus::Succeeded),
    ]);
    assert_eq!(
        anomalies,
        [Anomaly::DuplicateResult {
            first: "r1".into(),
            result_id: "r2".into()
        }]
    );
    assert_eq!(track.result_id.as_deref(), Some("r1"));
}

#[test]
fn classes_outside_invocations_leave_the_track_alone() {
    let (track, anomalies) = run(&[ev(C::InvocationPlanned)]);
    for class in EventClass::ALL
        .iter()
        .filter(|c| !contract(**c).is_invocation_event())
    {
        let outcome = step(&track, &ev(*class), &Config::default());
        assert_eq!((&outcome.track, outcome.transition), (&track, None), "{class}");
        assert_eq!(outcome.anomalies, anomalies);
    }
}

#[test]
fn facts_come_from_decoded_data() {
    let data: serde_json::Value =
        serde_json::from_str(include_str!("../model/samples/hook.json")).expect("JSON");
    let decoded = Data::decode_for(C::HookPreCompleted, &data).expect("decodes");
    let facts = EventFacts::from_data(C::HookPreCompleted, 7, at(1), &decoded);
    assert!(facts.hook_stop);
    assert_eq!((facts.seq, facts.time), (7, at(1)));
    let data: serde_json::Value =
        serde_json::from_str(include_str!("../model/samples/result.denied.json")).expect("JSON");
    let decoded = Data::decode_for(C::ResultCreated, &data).expect("decodes");
    let facts = EventFacts::from_data(C::ResultCreated, 8, None, &decoded);
    assert_eq!(facts.result_status, Some(ResultStatus::Denied));
    assert_eq!(facts.result_id.as_deref(), Some("result_write_secret"));
}

#[test]
fn rfc3339_times_parse() {
    let z = EventTime::parse_rfc3339("2026-05-08T00:00:00Z");
    assert_eq!(z, at(0));
    assert_eq!(EventTime::parse_rfc3339("2026-05-08t02:00:00+02:00"), z);
    assert_eq!(EventTime::parse_rfc3339("2026-05-07T23:30:00-00:30"), z);
    assert_eq!(
        EventTime::parse_rfc3339("2026-05-08T00:00:00.123456789123z"),
        z.map(|t| EventTime(t.0 + 123_456_789))
    );
    assert_eq!(
        EventTime::parse_rfc3339("2026-05-08T00:00:02.5Z"),
        z.map(|t| EventTime(t.0 + 2_500_000_000))
    );
    assert_eq!(
        EventTime::parse_rfc3339("1970-01-01T00:00:00Z"),
        Some(EventTime(0))
    );
    assert!(EventTime::parse_rfc3339("2024-02-29T00:00:00Z").is_some());
    for bad in [
        "",
        "2026-05-08",
        "2026-05-08T00:00:00",
        "2026-05-08T00:00:00.Z",
        "2026-13-08T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2026-05-08T24:00:00Z",
        "2026-05-08T00:00:00+2:00",
        "2026-05-08T00:00:00Zjunk",
        "9999-12-31T23:59:59Z",
        "２026-05-08T00:00:00Z",
    ] {
        assert_eq!(EventTime::parse_rfc3339(bad), None, "{bad}");
    }
}

/// A crafted sequence for each anomaly kind, after a clean `prefix` (a forward, non-terminal path).
fn crafted(kind: AnomalyKind, prefix: &[EventFacts]) -> Vec<EventFacts> {
    let mut events = prefix.to_vec();
    match kind {
        AnomalyKind::StatusMismatch => events.push(with_status(C::InvocationStarted, "queued")),
        AnomalyKind::EventAfterTerminal => {
            events.push(ev(C::InvocationSucceeded));
            events.push(ev(C::InvocationStarted));
        }
        AnomalyKind::IllegalTransition => {
            events.push(ev(C::InvocationPartialResult));
            events.push(ev(C::InvocationSelected));
        }
        AnomalyKind::OrphanEvent => events.retain(|e| e.class != C::InvocationPlanned),
        AnomalyKind::OutOfOrder => {
            // Later than anything in the prefix, then 20 s before that.
            events.push(EventFacts {
                time: at(5000),
                ..ev(C::InvocationProgress)
            });
            events.push(EventFacts {
                time: at(4980),
                ..ev(C::InvocationProgress)
            });
        }
        AnomalyKind::UnknownValue => events.push(EventFacts {
            unknown_values: vec![UnknownValue {
                path: "/status".into(),
                vocabulary: ProgressStatus::VOCABULARY.to_owned(),
                value: "defragmenting".into(),
            }],
            progress_status: Some(ProgressStatus::from_wire("defragmenting")),
            ..ev(C::InvocationProgress)
        }),
        AnomalyKind::DuplicateResult => {
            events.push(result("r1", ResultStatus::PartialSucceeded));
            events.push(result("r2", ResultStatus::Succeeded));
        }
        AnomalyKind::MissingField => events.push(EventFacts {
            missing_fields: vec!["/permission_input".into()],
            ..ev(C::PermissionRequested)
        }),
    }
    if kind == AnomalyKind::OrphanEvent && events.is_empty() {
        events.push(ev(C::InvocationStarted));
    }
    events
}

/// The forward path, in lifecycle order, non-terminal.
const FORWARD: &[EventClass] = &[
    C::InvocationSelected,
    C::InvocationArgumentsReady,
    C::HookPreStarted,
    C::HookPreCompleted,
    C::PermissionRequested,
    C::PermissionDecided,
    C::InvocationQueued,
    C::InvocationStarted,
    C::InvocationProgress,
    C::InvocationYielded,
    C::InvocationStarted,
    C::InvocationPartialResult,
    C::HookPostStarted,
    C::HookPostCompleted,
];

/// A clean prefix: planned, then a subsequence of the forward path, times ascending.
fn clean_prefix() -> impl Strategy<Value = Vec<EventFacts>> {
    (
        prop::collection::vec(any::<bool>(), FORWARD.len()),
        0i64..1000,
        prop::bool::ANY,
    )
        .prop_map(|(keep, start, timed)| {
            let mut events = vec![ev(C::InvocationPlanned)];
            for (class, keep) in FORWARD.iter().zip(keep) {
                if keep {
                    let mut facts = ev(*class);
                    if *class == C::PermissionDecided {
                        facts.behavior = Some(PermissionBehavior::Allow);
                    }
                    events.push(facts);
                }
            }
            for (i, event) in events.iter_mut().enumerate() {
                event.time = if timed { at(start + i as i64) } else { None };
            }
            events
        })
}

#[test]
fn every_anomaly_kind_has_a_crafted_sequence() {
    let prefix = [ev(C::InvocationPlanned), ev(C::InvocationSelected)];
    for kind in AnomalyKind::ALL {
        let (_, anomalies) = run(&crafted(*kind, &prefix));
        assert!(kinds(&anomalies).contains(kind), "{kind}: {anomalies:?}");
    }
}

/// Any facts, including unknown statuses, out-of-range times and the ledger's own classes.
fn any_facts() -> impl Strategy<Value = EventFacts> {
    let status = prop_oneof![
        prop::sample::select(InvocationStatus::KNOWN.to_vec()),
        "[a-z]{1,4}".prop_map(InvocationStatus::Other),
    ];
    let progress = prop_oneof![
        prop::sample::select(ProgressStatus::KNOWN.to_vec()),
        Just(ProgressStatus::Other("x".into())),
    ];
    let result_status = prop::sample::select(ResultStatus::KNOWN.to_vec());
    (
        prop::sample::select(EventClass::ALL.to_vec()),
        any::<u64>(),
        prop::option::of(prop_oneof![
            -100i64..100,
            Just(i64::MIN / 1_000_000_000),
            Just(i64::MAX / 1_000_000_000)
        ]),
        prop::option::of(status),
        prop::option::of(progress),
        prop::option::of(prop::sample::select(PermissionBehavior::ALL.to_vec())),
        any::<bool>(),
        prop::option::of(result_status),
        prop::option::of(prop::sample::select(vec!["r1", "r2"])),
    )
        .prop_map(
            |(class, seq, time, status, progress, behavior, hook_stop, result_status, result_id)| {
                EventFacts {
                    class,
                    seq,
                    time: time.map(|s| EventTime(s.saturating_mul(1_000_000_000))),
                    invocation_status: status,
                    progress_status: progress,
                    behavior,
                    hook_stop,
                    result_status,
                    result_id: result_id.map(str::to_owned),
                    unknown_values: Vec::new(),
                    missing_fields: Vec::new(),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any sequence: no panic; terminal states stick; the state moves only through a reported
    /// transition; every transition is legal; `unknown` only before planned.
    #[test]
    fn any_sequence_is_handled_and_terminal_states_stick(
        events in prop::collection::vec(any_facts(), 0..24),
    ) {
        let config = Config::default();
        let mut track = InvocationTrack::default();
        for event in &events {
            let outcome = step(&track, event, &config);
            if track.is_terminal() {
                prop_assert_eq!(outcome.track.state, track.state);
            }
            match outcome.transition {
                Some(t) => {
                    prop_assert_eq!((t.from, t.to), (track.state, outcome.track.state));
                    prop_assert!(t.from.may_move_to(t.to));
                }
                None => prop_assert_eq!(outcome.track.state, track.state),
            }
            prop_assert_eq!(outcome.track.state == S::Unknown, !outcome.track.planned);
            track = outcome.track;
        }
    }

    /// Forward paths in time order, with data that agrees with the class, are anomaly-free.
    #[test]
    fn clean_paths_have_no_anomalies(prefix in clean_prefix(), end in prop::sample::select(vec![
        C::InvocationSucceeded, C::InvocationFailed, C::InvocationCanceled, C::InvocationTimedOut,
    ])) {
        let mut events = prefix;
        events.push(ev(end));
        events.push(result("r1", ResultStatus::Succeeded));
        let (track, anomalies) = run(&events);
        prop_assert_eq!(anomalies, vec![]);
        prop_assert!(track.is_terminal());
    }

    /// Each anomaly kind is produced by its crafted sequence after any clean prefix.
    #[test]
    fn crafted_sequences_produce_their_anomaly(
        prefix in clean_prefix(),
        kind in prop::sample::select(AnomalyKind::ALL.to_vec()),
    ) {
        let (_, anomalies) = run(&crafted(kind, &prefix));
        prop_assert!(kinds(&anomalies).contains(&kind), "{}: {:?}", kind, anomalies);
    }
}
