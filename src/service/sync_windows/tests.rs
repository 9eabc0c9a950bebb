use super::*;

fn ts(text: &str) -> Timestamp {
    text.parse().expect("timestamp")
}

fn next(schedule: &str, after: &str) -> String {
    Cron::parse(schedule)
        .expect("schedule")
        .next_after(ts(after), &TimeZone::UTC)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn window(kind: &str, schedule: &str, duration: &str) -> SyncWindow {
    SyncWindow {
        kind: kind.to_owned(),
        schedule: schedule.to_owned(),
        duration: duration.to_owned(),
        applications: vec!["*".to_owned()],
        ..SyncWindow::default()
    }
}

// ---- cron fields ----

#[test]
fn every_minute_fires_on_the_next_whole_minute() {
    assert_eq!(next("* * * * *", "2024-03-15T10:30:00Z"), "2024-03-15T10:31:00Z");
    assert_eq!(
        next("* * * * *", "2024-03-15T10:30:59.5Z"),
        "2024-03-15T10:31:00Z"
    );
}

#[test]
fn fixed_time_rolls_to_the_next_day_month_and_year() {
    assert_eq!(next("0 22 * * *", "2024-03-15T10:30:00Z"), "2024-03-15T22:00:00Z");
    assert_eq!(next("0 22 * * *", "2024-03-15T22:00:00Z"), "2024-03-16T22:00:00Z");
    assert_eq!(next("30 1 1 * *", "2024-03-15T10:30:00Z"), "2024-04-01T01:30:00Z");
    assert_eq!(next("0 0 1 1 *", "2024-03-15T10:30:00Z"), "2025-01-01T00:00:00Z");
    assert_eq!(
        next("59 23 31 12 *", "2024-12-31T23:59:00Z"),
        "2025-12-31T23:59:00Z"
    );
}

#[test]
fn lists_ranges_and_steps() {
    assert_eq!(
        next("5,45 * * * *", "2024-03-15T10:30:00Z"),
        "2024-03-15T10:45:00Z"
    );
    assert_eq!(
        next("10-12 * * * *", "2024-03-15T10:12:00Z"),
        "2024-03-15T11:10:00Z"
    );
    assert_eq!(
        next("*/15 * * * *", "2024-03-15T10:31:00Z"),
        "2024-03-15T10:45:00Z"
    );
    assert_eq!(
        next("0 8-18/4 * * *", "2024-03-15T10:30:00Z"),
        "2024-03-15T12:00:00Z"
    );
    assert_eq!(
        next("0 8-18/4 * * *", "2024-03-15T16:30:00Z"),
        "2024-03-16T08:00:00Z"
    );
    // `v/step` runs from v to the field's end.
    assert_eq!(
        next("50/5 * * * *", "2024-03-15T10:56:00Z"),
        "2024-03-15T11:50:00Z"
    );
}

#[test]
fn names_are_accepted_in_any_case() {
    // 2024-03-15 is a Friday.
    assert_eq!(
        next("0 9 * * MON", "2024-03-15T10:00:00Z"),
        "2024-03-18T09:00:00Z"
    );
    assert_eq!(
        next("0 9 * * mon-wed", "2024-03-19T10:00:00Z"),
        "2024-03-20T09:00:00Z"
    );
    assert_eq!(
        next("0 0 1 jun *", "2024-03-15T10:00:00Z"),
        "2024-06-01T00:00:00Z"
    );
    assert_eq!(
        next("0 0 1 Oct-Dec/2 *", "2024-03-15T10:00:00Z"),
        "2024-10-01T00:00:00Z"
    );
}

#[test]
fn sunday_is_zero_or_seven() {
    assert_eq!(next("0 0 * * 0", "2024-03-15T10:00:00Z"), "2024-03-17T00:00:00Z");
    assert_eq!(next("0 0 * * 7", "2024-03-15T10:00:00Z"), "2024-03-17T00:00:00Z");
    assert_eq!(
        next("0 0 * * 6-7", "2024-03-17T10:00:00Z"),
        "2024-03-23T00:00:00Z"
    );
}

#[test]
fn day_of_month_and_weekday_either_when_both_restricted() {
    // The 20th (a Wednesday) or a Monday (the 18th), whichever comes first.
    assert_eq!(next("0 0 20 * 1", "2024-03-15T10:00:00Z"), "2024-03-18T00:00:00Z");
    assert_eq!(next("0 0 20 * 1", "2024-03-18T10:00:00Z"), "2024-03-20T00:00:00Z");
    assert_eq!(next("0 0 13 * 5", "2024-03-15T10:00:00Z"), "2024-03-22T00:00:00Z");
    // With `*` in one of them, the other decides.
    assert_eq!(next("0 0 13 * *", "2024-03-15T10:00:00Z"), "2024-04-13T00:00:00Z");
    assert_eq!(next("0 0 ? * 1", "2024-03-15T10:00:00Z"), "2024-03-18T00:00:00Z");
}

#[test]
fn leap_days_and_impossible_dates() {
    assert_eq!(next("0 0 29 2 *", "2024-03-15T10:00:00Z"), "2028-02-29T00:00:00Z");
    assert_eq!(next("0 0 31 4 *", "2024-03-15T10:00:00Z"), "");
}

#[test]
fn bad_schedules_say_what_is_wrong() {
    let err = |s: &str| Cron::parse(s).expect_err(s);
    assert!(err("* * * *").contains("expected 5 fields"), "{}", err("* * * *"));
    assert!(err("* * * * * *").contains("found 6"));
    // Not a time zone either (cronexpr would read a sixth field as one).
    assert!(err("0 0 * * * Europe/Paris").contains("found 6"));
    assert!(
        err("60 * * * *").contains("minute field \"60\": value must be in range 0..=59; found 60"),
        "{}",
        err("60 * * * *")
    );
    assert!(err("* 24 * * *").contains("hour field"));
    assert!(err("* * 0 * *").contains("day of month field"));
    assert!(err("* * * 13 *").contains("month field"));
    assert!(err("* * * * 8").contains("day of week field"));
    assert!(err("*/0 * * * *").contains("step must be greater than 0"));
    assert!(err("*/x * * * *").contains("minute field \"*/x\""));
    assert!(err("30-10 * * * *").contains("ascending order; found 30-10"));
    assert!(err("foo * * * *").contains("\"foo\" is not a number"));
    assert!(err("* * * * funday").contains("not a number"));
    assert!(err("1,,2 * * * *").contains("minute field \"1,,2\""));
    assert!(err("@daily").contains("descriptors"));
    assert!(err("").contains("found 0"));
    // Errors are one line: the crate's copy of the input and its caret are left out.
    assert!(!err("60 * * * *").contains('\n'));
}

#[test]
fn question_mark_is_a_star_in_every_field() {
    assert_eq!(next("? ? ? ? ?", "2024-03-15T10:30:00Z"), "2024-03-15T10:31:00Z");
    assert_eq!(next("0 0 ? * 1", "2024-03-15T10:00:00Z"), "2024-03-18T00:00:00Z");
}

#[test]
fn cronexpr_extensions_are_refused_as_robfig_refuses_them() {
    for (schedule, field) in [
        ("0 0 L * *", "day of month"),
        ("0 0 15W * *", "day of month"),
        ("0 0 * * 5L", "day of week"),
        ("0 0 * * 5#3", "day of week"),
        ("0 0 * * MONL", "day of week"),
        ("H * * * *", "minute"),
        ("0 0 * JANUARY *", "month"),
        ("0 0 * * 1;2", "day of week"),
    ] {
        let err = Cron::parse(schedule).expect_err(schedule);
        assert!(err.contains(&format!("{field} field")), "{schedule}: {err}");
    }
}

#[test]
fn any_day_follows_robfig_not_the_first_character() {
    // 2024-09-24 is a Tuesday. A stepped `*/2` restricts the day of month (robfig), so with a
    // restricted day of week either matches: the 25th (odd) comes first.
    assert_eq!(
        next("0 12 */2 * 0,6", "2024-09-24T13:06:52Z"),
        "2024-09-25T12:00:00Z"
    );
    // A bare `*` item anywhere in the field means any day: then the weekday decides.
    assert_eq!(
        next("0 12 1-31,* * 2", "2024-09-24T13:06:52Z"),
        "2024-10-01T12:00:00Z"
    );
    assert_eq!(
        next("0 12 */1 * 2", "2024-09-24T13:06:52Z"),
        "2024-10-01T12:00:00Z"
    );
    assert_eq!(
        next("0 12 */01 * 2", "2024-09-24T13:06:52Z"),
        "2024-10-01T12:00:00Z"
    );
}

// ---- windows ----

#[test]
fn active_from_a_firing_time_for_the_duration() {
    let w = window("deny", "0 22 * * *", "1h30m");
    assert!(!w.active_at(ts("2024-03-15T21:59:59Z")));
    assert!(w.active_at(ts("2024-03-15T22:00:00Z")));
    assert!(w.active_at(ts("2024-03-15T23:29:59.999Z")));
    assert!(!w.active_at(ts("2024-03-15T23:30:00Z")));
    // Across midnight.
    let w = window("deny", "0 23 * * *", "2h");
    assert!(w.active_at(ts("2024-03-16T00:30:00Z")));
    assert!(!w.active_at(ts("2024-03-16T01:00:00Z")));
}

#[test]
fn every_minute_for_an_hour_is_always_active_and_zero_never() {
    assert!(window("deny", "* * * * *", "1h").active_at(ts("2024-03-15T10:30:17Z")));
    assert!(window("deny", "* * * * *", "1m").active_at(ts("2024-03-15T10:30:59Z")));
    assert!(!window("deny", "* * * * *", "0s").active_at(ts("2024-03-15T10:30:00Z")));
}

#[test]
fn long_durations_reach_back() {
    let w = window("allow", "0 0 1 1 *", "8760h");
    assert!(w.active_at(ts("2024-12-30T00:00:00Z")));
    let w = window("allow", "0 0 1 1 *", "720h");
    assert!(!w.active_at(ts("2024-03-15T00:00:00Z")));
}

#[test]
fn a_time_zone_shifts_the_schedule() {
    let mut w = window("deny", "0 9 * * *", "1h");
    w.time_zone = "Asia/Tokyo".to_owned(); // UTC+9, no DST
    assert!(w.active_at(ts("2024-03-15T00:30:00Z")));
    assert!(!w.active_at(ts("2024-03-15T09:30:00Z")));
    w.time_zone = "America/New_York".to_owned(); // UTC-4 in July
    assert!(w.active_at(ts("2024-07-15T13:15:00Z")));
    assert!(!w.active_at(ts("2024-07-15T09:15:00Z")));
    // UTC-5 in January.
    assert!(w.active_at(ts("2024-01-15T14:15:00Z")));
}

#[test]
fn a_dst_gap_fires_after_the_gap() {
    // 2024-03-10 02:30 does not exist in New York; it fires at 03:30 EDT (07:30 UTC).
    let next = Cron::parse("30 2 10 3 *").expect("schedule").next_after(
        ts("2024-03-01T00:00:00Z"),
        &zone("America/New_York").expect("zone"),
    );
    assert_eq!(
        next.map(|t| t.to_string()).unwrap_or_default(),
        "2024-03-10T07:30:00Z"
    );
}

#[test]
fn a_dst_fold_fires_once_at_its_earlier_instant() {
    // 2024-11-03 01:30 happens twice in New York: 05:30 UTC (EDT) and 06:30 UTC (EST).
    let cron = Cron::parse("30 1 * * *").expect("schedule");
    let ny = zone("America/New_York").expect("zone");
    let next = |after: &str| {
        cron.next_after(ts(after), &ny)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    assert_eq!(next("2024-11-03T04:00:00Z"), "2024-11-03T05:30:00Z");
    assert_eq!(next("2024-11-03T05:45:00Z"), "2024-11-04T06:30:00Z");
    // From inside the repeated hour's second pass, too.
    assert_eq!(next("2024-11-03T06:10:00Z"), "2024-11-04T06:30:00Z");
    // Every minute through the fold: each wall-clock minute once.
    let every = Cron::parse("* * * * *").expect("schedule");
    assert_eq!(
        every
            .next_after(ts("2024-11-03T06:10:00Z"), &ny)
            .map(|t| t.to_string())
            .unwrap_or_default(),
        "2024-11-03T07:00:00Z"
    );
}

#[test]
fn problems_name_the_field() {
    assert_eq!(window("allow", "0 0 * * *", "1h").problem(), None);
    let problem = |w: SyncWindow| w.problem().unwrap_or_default();
    assert!(problem(window("maybe", "* * * * *", "1h")).contains("kind must be allow or deny"));
    assert!(problem(window("deny", "* * *", "1h")).contains("schedule \"* * *\""));
    assert!(problem(window("deny", "* * * * *", "soon")).contains("invalid duration \"soon\""));
    assert!(problem(window("deny", "* * * * *", "")).contains("invalid duration"));
    let mut w = window("deny", "* * * * *", "1h");
    w.time_zone = "Mars/Olympus".to_owned();
    assert!(problem(w.clone()).contains("time zone \"Mars/Olympus\" is unknown"));
    w.time_zone = "Europe/Paris".to_owned();
    assert_eq!(w.problem(), None);
    // An unparsable stored window is never active.
    assert!(!window("deny", "bad", "1h").active_at(ts("2024-03-15T00:00:00Z")));
}

// ---- matching ----

fn target() -> Target<'static> {
    Target {
        name: "guestbook",
        namespace: "prod",
        server: "https://kubernetes.default.svc",
        cluster_name: "in-cluster",
    }
}

fn selecting(apps: &[&str], namespaces: &[&str], clusters: &[&str], and: bool) -> SyncWindow {
    let own = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
    SyncWindow {
        kind: "deny".to_owned(),
        schedule: "* * * * *".to_owned(),
        duration: "1h".to_owned(),
        applications: own(apps),
        namespaces: own(namespaces),
        clusters: own(clusters),
        and_operator: and,
        ..SyncWindow::default()
    }
}

#[test]
fn any_list_matching_is_enough_without_and() {
    let t = target();
    assert!(selecting(&["guest*"], &[], &[], false).matches(&t));
    assert!(selecting(&["other"], &["prod"], &[], false).matches(&t));
    assert!(selecting(&["other"], &["dev"], &["in-*"], false).matches(&t));
    assert!(selecting(&[], &[], &["https://kubernetes.*"], false).matches(&t));
    assert!(!selecting(&["other"], &["dev"], &["remote"], false).matches(&t));
    assert!(!selecting(&[], &[], &[], false).matches(&t));
}

#[test]
fn every_non_empty_list_must_match_with_and() {
    let t = target();
    assert!(selecting(&["guest*"], &["prod"], &[], true).matches(&t));
    assert!(!selecting(&["guest*"], &["dev"], &[], true).matches(&t));
    assert!(selecting(&["*"], &["p*"], &["in-cluster"], true).matches(&t));
    assert!(!selecting(&["*"], &["p*"], &["remote"], true).matches(&t));
    assert!(!selecting(&[], &[], &[], true).matches(&t));
}

#[test]
fn an_empty_destination_field_matches_no_cluster() {
    let t = Target {
        cluster_name: "",
        ..target()
    };
    assert!(!selecting(&[], &[], &["*-cluster"], false).matches(&t));
    let t = Target {
        server: "",
        cluster_name: "",
        ..target()
    };
    assert!(!selecting(&[], &[], &["*"], false).matches(&t));
}

// ---- can sync ----

const NOW: &str = "2024-03-15T10:30:00Z";

fn active(kind: &str, manual: bool) -> SyncWindow {
    SyncWindow {
        manual_sync: manual,
        ..window(kind, "* * * * *", "1h")
    }
}

fn inactive(kind: &str, manual: bool) -> SyncWindow {
    SyncWindow {
        manual_sync: manual,
        ..window(kind, "0 0 1 1 *", "1m")
    }
}

#[test]
fn no_windows_allow_every_sync() {
    assert!(can_sync(&[], ts(NOW), true));
    assert!(can_sync(&[], ts(NOW), false));
}

#[test]
fn an_active_deny_blocks_unless_every_active_deny_allows_manual_sync() {
    let now = ts(NOW);
    assert!(!can_sync(&[active("deny", false)], now, true));
    assert!(can_sync(&[active("deny", true)], now, true));
    assert!(!can_sync(&[active("deny", true)], now, false));
    assert!(!can_sync(
        &[active("deny", true), active("deny", false)],
        now,
        true
    ));
    // Deny wins over an active allow.
    assert!(!can_sync(
        &[active("allow", true), active("deny", false)],
        now,
        true
    ));
    let blocked = [active("deny", true), active("deny", false)];
    assert_eq!(blocking_window(&blocked, now), Some(&blocked[1]));
    assert_eq!(blocking_window(&[active("deny", true)], now), None);
}

#[test]
fn allow_windows_allow_only_while_active() {
    let now = ts(NOW);
    assert!(can_sync(&[active("allow", false)], now, false));
    assert!(can_sync(
        &[active("allow", false), inactive("allow", false)],
        now,
        false
    ));
    assert!(!can_sync(&[inactive("allow", false)], now, true));
    assert!(can_sync(&[inactive("allow", true)], now, true));
    assert!(!can_sync(&[inactive("allow", true)], now, false));
    let blocked = [inactive("allow", false)];
    assert_eq!(blocking_window(&blocked, now), Some(&blocked[0]));
}

#[test]
fn inactive_denies_do_not_block() {
    let now = ts(NOW);
    assert!(can_sync(&[inactive("deny", false)], now, false));
    assert!(can_sync(&[inactive("deny", false)], now, true));
}

#[test]
fn outside_allow_windows_a_manual_sync_needs_every_allow_window_to_allow_it() {
    let now = ts(NOW);
    let mixed = [inactive("allow", true), inactive("allow", false)];
    assert!(!can_sync(&mixed, now, true));
    assert_eq!(blocking_window(&mixed, now), Some(&mixed[1]));
    let all = [inactive("allow", true), inactive("allow", true)];
    assert!(can_sync(&all, now, true));
    assert!(!can_sync(&all, now, false));
    assert_eq!(blocking_window(&all, now), None);
}

/// The weekdays (bit 0 = Sunday) on which `0 0 * * <field>` fires, over one week.
fn weekdays(field: &str) -> u8 {
    let cron = Cron::parse(&format!("0 0 * * {field}")).expect(field);
    // 2024-03-16 is a Saturday: the next seven midnights are Sunday to Saturday.
    let mut at = ts("2024-03-16T12:00:00Z");
    let mut days = 0u8;
    while let Some(t) = cron.next_after(at, &TimeZone::UTC) {
        if t >= ts("2024-03-24T00:00:00Z") {
            break;
        }
        days |= 1 << t.to_zoned(TimeZone::UTC).weekday().to_sunday_zero_offset();
        at = t;
    }
    days
}

/// The minutes of an hour at which `<field> * * * *` fires.
fn minutes(field: &str) -> u64 {
    let cron = Cron::parse(&format!("{field} * * * *")).expect(field);
    let mut at = ts("2024-03-15T09:59:30Z");
    let mut set = 0u64;
    while let Some(t) = cron.next_after(at, &TimeZone::UTC) {
        if t >= ts("2024-03-15T11:00:00Z") {
            break;
        }
        set |= 1 << (t.as_second() % 3600 / 60);
        at = t;
    }
    set
}

#[test]
fn weekday_steps_run_over_sunday_to_saturday() {
    assert_eq!(weekdays("1/3"), (1 << 1) | (1 << 4));
    assert_eq!(weekdays("*/3"), (1 << 0) | (1 << 3) | (1 << 6));
    assert_eq!(weekdays("*/7"), 1);
    assert_eq!(weekdays("sun/2"), (1 << 0) | (1 << 2) | (1 << 4) | (1 << 6));
    assert_eq!(weekdays("*"), 0b111_1111);
    // 7 is still Sunday as a literal or a range end.
    assert_eq!(weekdays("7"), 1);
    assert_eq!(weekdays("5-7"), (1 << 5) | (1 << 6) | 1);
    assert_eq!(weekdays("0-7/7"), 1);
    let err = Cron::parse("* * * * 7/2").expect_err("7/2");
    assert!(err.contains("day of week"), "{err}");
}

#[test]
fn steps_past_the_field_are_refused_without_overflow() {
    // robfig/cron takes any step and fires only at the range's start when the step is longer
    // than the range; cronexpr refuses a step larger than the field's largest value (README).
    assert_eq!(minutes("58-59/30"), 1 << 58);
    assert_eq!(minutes("1/59"), 1 << 1);
    assert_eq!(minutes("*/59"), 1 | (1 << 59));
    for schedule in [
        "*/60 * * * *",
        "1/4294967295 * * * *",
        "*/99999999999 * * * *",
        "*/99999999999999999999999 * * * *",
        "0 */24 * * *",
        "0 0 */32 * *",
        "0 0 * */13 *",
        "0 0 * * */8",
        "0 0 * * 6/4294967295",
    ] {
        let err = Cron::parse(schedule).expect_err(schedule);
        assert!(err.contains("field"), "{schedule}: {err}");
    }
    assert!(Cron::parse("*/0 * * * *").is_err());
}

#[test]
fn an_invalid_assigned_window_blocks_every_sync() {
    let now = ts(NOW);
    let bad = window("deny", "61 * * * *", "1h");
    assert!(!can_sync(std::slice::from_ref(&bad), now, true));
    assert!(!can_sync(&[bad.clone(), active("allow", true)], now, false));
    assert!(!can_sync(&[window("allow", "* * * * *", "1 hour")], now, true));
    assert!(!can_sync(&[window("later", "* * * * *", "1h")], now, true));
    let tz = SyncWindow {
        time_zone: "Mars/Base".to_owned(),
        ..active("allow", true)
    };
    assert!(!can_sync(&[tz], now, true));
}

fn raw(windows: Value) -> Vec<Value> {
    windows.as_array().expect("array").clone()
}

#[test]
fn assignment_keeps_invalid_windows_that_match_or_cannot_be_matched() {
    let now = ts(NOW);
    let t = target();
    // A sound window that matches, and an invalid one for another application: only the first.
    let windows = raw(serde_json::json!([
        {"kind": "allow", "schedule": "* * * * *", "duration": "1h", "applications": ["*"]},
        {"kind": "deny", "schedule": "61 * * * *", "duration": "1h", "applications": ["other"]},
    ]));
    let a = Assignment::of(&windows, &t);
    assert_eq!(a.windows.len(), 1);
    assert!(a.invalid.is_empty());
    assert!(a.can_sync(now, false));
    assert_eq!(a.refusal(now), None);

    // An invalid window that matches blocks, and the refusal names it.
    let windows = raw(serde_json::json!([
        {"kind": "allow", "schedule": "* * * * *", "duration": "1h", "applications": ["*"]},
        {"kind": "deny", "schedule": "61 * * * *", "duration": "1h", "applications": ["*"]},
    ]));
    let a = Assignment::of(&windows, &t);
    assert_eq!(a.windows.len(), 2);
    assert_eq!(a.invalid.len(), 1);
    assert_eq!(a.invalid[0].index, 1);
    assert!(!a.can_sync(now, true));
    let why = a.refusal(now).expect("refused");
    assert!(why.contains("invalid sync window"), "{why}");
    assert!(why.contains("spec.syncWindows[1]"), "{why}");
    assert!(why.contains("minute field \"61\""), "{why}");

    // A window that does not even read as one blocks every application of the project.
    let windows = raw(serde_json::json!([
        {"kind": "deny", "schedule": "0 0 1 1 *", "duration": "1m", "applications": "not-a-list"},
    ]));
    let a = Assignment::of(&windows, &t);
    assert!(a.windows.is_empty());
    assert_eq!(a.invalid.len(), 1);
    assert_eq!(a.invalid[0].index, 0);
    assert!(!a.can_sync(now, true));
    let why = a.refusal(now).expect("refused");
    assert!(why.contains("spec.syncWindows[0]"), "{why}");
}
