//! AppProject sync windows, evaluated as Argo CD evaluates them: a window is a cron schedule
//! (five fields, in the window's time zone) and a duration; it is active at `t` when some firing
//! time `s` of its schedule has `s <= t < s + duration`. Which windows apply to an application,
//! which are active, and whether a (manual or automated) sync may run now.
//!
//! Transport-free: the use cases read windows from the stored project JSON and ask here.
//!
//! Two deliberate differences from Argo CD (robfig/cron), both in what a window's time means:
//!
//! * A schedule is evaluated in the real local (wall-clock) time of the window's zone, DST
//!   included: `0 2 * * *` in Europe/Paris fires at 02:00 Paris time all year. Argo CD instead
//!   applies the zone's offset to the schedule, which can put a window an hour off around DST
//!   changes.
//! * A schedule that never fires (`0 0 31 4 *`) makes a window that is never active. Argo CD
//!   treats such a window as always active.
//!
//! A window that is invalid as stored (it does not deserialize, or its kind, schedule,
//! duration or time zone does not parse: possible for projects written before validation or by
//! other paths) does not silently stop blocking: it keeps every sync of the applications it
//! may apply to out until the project is fixed (see [`Assignment`]).

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Deserialize;
use serde_json::Value;

use crate::config::duration::parse_go_duration;
use crate::rbac::MatchMode;
use crate::rbac::matcher::Matcher;

/// A sync window as stored in `spec.syncWindows`.
#[derive(Deserialize, Default, Debug, Clone, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub struct SyncWindow {
    pub kind: String,
    pub schedule: String,
    pub duration: String,
    pub applications: Vec<String>,
    pub namespaces: Vec<String>,
    pub clusters: Vec<String>,
    pub manual_sync: bool,
    pub time_zone: String,
    pub and_operator: bool,
}

/// What a window is matched against: the application's name and destination.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub server: &'a str,
    pub cluster_name: &'a str,
}

/// A window whose fields all parsed: what evaluation needs.
#[derive(Debug, Clone)]
struct Compiled {
    cron: Cron,
    duration: Duration,
    zone: TimeZone,
}

impl SyncWindow {
    /// `None` when the window is sound; otherwise what is wrong with it (kind, schedule,
    /// duration or time zone), in words a user can act on.
    pub fn problem(&self) -> Option<String> {
        if self.kind != "allow" && self.kind != "deny" {
            return Some(format!("kind must be allow or deny, not {:?}", self.kind));
        }
        self.compile().err()
    }

    fn compile(&self) -> Result<Compiled, String> {
        let cron = Cron::parse(&self.schedule)?;
        let duration = parse_go_duration(&self.duration)
            .map_err(|e| format!("{e} (a duration such as 1h, 30m or 1h30m)"))?;
        let zone = zone(&self.time_zone)?;
        Ok(Compiled { cron, duration, zone })
    }

    pub fn is_deny(&self) -> bool {
        self.kind == "deny"
    }

    pub fn is_allow(&self) -> bool {
        self.kind == "allow"
    }

    /// Whether the window is active at `now`. A window that does not parse (stored before it
    /// was validated) is never active; [`can_sync`] treats it as blocking instead.
    pub fn active_at(&self, now: Timestamp) -> bool {
        let Ok(c) = self.compile() else {
            return false;
        };
        let nanos = i128::try_from(c.duration.as_nanos()).unwrap_or(i128::MAX);
        let since = now
            .as_nanosecond()
            .checked_sub(nanos)
            .and_then(|n| Timestamp::from_nanosecond(n).ok())
            .unwrap_or(Timestamp::MIN);
        c.cron
            .next_after(since, &c.zone)
            .is_some_and(|start| start <= now)
    }

    /// Whether the window applies to the application. Without `andOperator`, any of the
    /// applications, namespaces or clusters lists matching is enough; with it, every non-empty
    /// list must match. A window with all three lists empty matches nothing.
    pub fn matches(&self, target: &Target<'_>) -> bool {
        let apps = list_match(&self.applications, |p| glob(p, target.name));
        let namespaces = list_match(&self.namespaces, |p| glob(p, target.namespace));
        let clusters = list_match(&self.clusters, |p| {
            (!target.server.is_empty() && glob(p, target.server))
                || (!target.cluster_name.is_empty() && glob(p, target.cluster_name))
        });
        let results = [apps, namespaces, clusters];
        if self.and_operator {
            results.iter().any(Option::is_some) && results.iter().all(|r| r.unwrap_or(true))
        } else {
            results.iter().any(|r| r == &Some(true))
        }
    }
}

/// `None` for an empty list (it does not take part), else whether some pattern matches.
fn list_match(patterns: &[String], mut one: impl FnMut(&str) -> bool) -> Option<bool> {
    (!patterns.is_empty()).then(|| patterns.iter().any(|p| one(p)))
}

fn glob(pattern: &str, value: &str) -> bool {
    Matcher::compile(pattern, MatchMode::Glob)
        .matches(value)
        .unwrap_or(false)
}

/// The zone named by an IANA name; empty (and `UTC`) is UTC, `Local` the server's own zone.
fn zone(name: &str) -> Result<TimeZone, String> {
    match name {
        "" | "UTC" => Ok(TimeZone::UTC),
        "Local" => Ok(TimeZone::system()),
        _ => TimeZone::get(name)
            .map_err(|_| format!("time zone {name:?} is unknown (use an IANA name such as Europe/Paris)")),
    }
}

/// Whether a sync may start now given the windows that apply to the application, as Argo CD
/// decides it (`SyncWindows.CanSync`):
///
/// * no window applies: yes;
/// * an active deny window applies: only a manual sync, and only if every active deny window
///   has `manualSync` (deny wins over an active allow);
/// * else an active allow window applies: yes;
/// * else allow windows apply but none is active: only a manual sync, and only if every one of
///   those inactive allow windows has `manualSync` (upstream's `manualEnabled()`);
/// * else (only inactive deny windows): yes.
///
/// An assigned window that is invalid ([`SyncWindow::problem`]) blocks every sync, manual or
/// automated: a broken window must not silently stop blocking.
pub fn can_sync(assigned: &[SyncWindow], now: Timestamp, manual: bool) -> bool {
    if assigned.iter().any(|w| w.problem().is_some()) {
        return false;
    }
    let active: Vec<&SyncWindow> = assigned.iter().filter(|w| w.active_at(now)).collect();
    let active_denies: Vec<&&SyncWindow> = active.iter().filter(|w| w.is_deny()).collect();
    if !active_denies.is_empty() {
        return manual && active_denies.iter().all(|w| w.manual_sync);
    }
    if active.iter().any(|w| w.is_allow()) {
        return true;
    }
    let mut inactive_allows = assigned.iter().filter(|w| w.is_allow()).peekable();
    if inactive_allows.peek().is_some() {
        return manual && inactive_allows.all(|w| w.manual_sync);
    }
    true
}

/// The first window (invalid, active deny, or inactive allow without `manualSync`) that keeps
/// a manual sync from running now, for the refusal message; `None` when a manual sync may run.
pub fn blocking_window(assigned: &[SyncWindow], now: Timestamp) -> Option<&SyncWindow> {
    if can_sync(assigned, now, true) {
        return None;
    }
    assigned
        .iter()
        .find(|w| w.problem().is_some())
        .or_else(|| {
            assigned
                .iter()
                .find(|w| w.is_deny() && w.active_at(now) && !w.manual_sync)
        })
        .or_else(|| assigned.iter().find(|w| w.is_allow() && !w.manual_sync))
        .or_else(|| assigned.iter().find(|w| w.is_allow()))
}

/// A stored window that is invalid: where it is in `spec.syncWindows` (from 0) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidWindow {
    pub index: usize,
    pub problem: String,
}

/// The project's windows as they bear on one application: the windows that read and match it
/// (sound or not), and the invalid windows that block it, those that match it and those that
/// do not even read as a window (they cannot be matched, so they block every application of
/// the project).
#[derive(Debug, Clone, Default)]
pub struct Assignment {
    pub windows: Vec<SyncWindow>,
    pub invalid: Vec<InvalidWindow>,
}

impl Assignment {
    /// From the stored `spec.syncWindows` array.
    pub fn of(stored: &[Value], target: &Target<'_>) -> Self {
        let mut out = Self::default();
        for (index, raw) in stored.iter().enumerate() {
            match SyncWindow::deserialize(raw) {
                Ok(w) => {
                    if !w.matches(target) {
                        continue;
                    }
                    if let Some(problem) = w.problem() {
                        out.invalid.push(InvalidWindow { index, problem });
                    }
                    out.windows.push(w);
                }
                Err(e) => out.invalid.push(InvalidWindow {
                    index,
                    problem: format!("it does not read as a sync window: {e}"),
                }),
            }
        }
        out
    }

    /// Whether a (manual or automated) sync may start now: never while an invalid window
    /// blocks, else as [`can_sync`] decides.
    pub fn can_sync(&self, now: Timestamp, manual: bool) -> bool {
        self.invalid.is_empty() && can_sync(&self.windows, now, manual)
    }

    /// Why a manual sync may not start now, for the refusal; `None` when it may.
    pub fn refusal(&self, now: Timestamp) -> Option<String> {
        if let Some(bad) = self.invalid.first() {
            return Some(format!(
                "cannot sync: the project has an invalid sync window (spec.syncWindows[{}]): {}; \
                 fix or remove it",
                bad.index, bad.problem
            ));
        }
        let w = blocking_window(&self.windows, now)?;
        let zone = if w.time_zone.is_empty() {
            "UTC"
        } else {
            &w.time_zone
        };
        let why = if w.is_deny() {
            "is active and does not allow manual sync"
        } else {
            "is the application's allow window and is not active now"
        };
        Some(format!(
            "cannot sync: blocked by sync window: {} window {:?} for {} ({zone}) {why}",
            w.kind, w.schedule, w.duration
        ))
    }
}

// ---- cron ----

/// A five-field cron schedule (minute hour day-of-month month day-of-week) as Argo CD reads it
/// (robfig/cron's standard parser), parsed and driven by the `cronexpr` crate.
#[derive(Debug, Clone)]
pub struct Cron(cronexpr::Crontab);

const FIELD_NAMES: [&str; 5] = ["minute", "hour", "day of month", "month", "day of week"];
const MONTH: usize = 3;
const WEEKDAY: usize = 4;
const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// A fold repeats at most this many minutes of wall-clock time (a day, to be generous).
const MAX_FOLD_MINUTES: usize = 24 * 60;

impl Cron {
    pub fn parse(schedule: &str) -> Result<Self, String> {
        let bad = |why: String| format!("schedule {schedule:?} is not a cron schedule: {why}");
        if schedule.trim_start().starts_with('@') {
            return Err(bad(
                "descriptors such as @daily are not accepted; write five fields such as \"0 0 * * *\""
                    .to_owned(),
            ));
        }
        // Counted here: cronexpr would read a sixth field as a time zone.
        let fields: Vec<&str> = schedule.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(bad(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            )));
        }
        let field_error = |index: usize, why: String| {
            bad(format!("{} field {:?}: {why}", FIELD_NAMES[index], fields[index]))
        };
        let mut rewritten = Vec::with_capacity(5);
        for (index, field) in fields.iter().enumerate() {
            rewritten.push(robfig_field(index, field).map_err(|why| field_error(index, why))?);
        }
        match crontab(&rewritten.join(" ")) {
            Ok(parsed) => Ok(Self(parsed)),
            Err(err) => {
                // Name the field at fault: each one alone, with `*` in the others.
                for (index, field) in rewritten.iter().enumerate() {
                    let mut probe = ["*"; 5];
                    probe[index] = field;
                    if let Err(err) = crontab(&probe.join(" ")) {
                        return Err(field_error(index, reason(&err)));
                    }
                }
                Err(bad(reason(&err)))
            }
        }
    }

    /// The first firing time strictly after `after`, in the real local (wall-clock) time of
    /// `zone`; `None` when the schedule does not fire within four years (cronexpr's horizon),
    /// and then the window is never active. Both differ from Argo CD on purpose (see the module
    /// documentation): robfig/cron applies the zone's offset rather than its local time, and
    /// upstream treats a window whose schedule never fires as always active.
    ///
    /// The crate runs the schedule over the zone's wall-clock time written as UTC (which has no
    /// gaps or folds), and each wall-clock firing time is then placed in the zone: one that a
    /// DST gap skips fires on the later side of the gap (the `compatible` rule, as Go's time
    /// normalization does); one that a fold repeats fires once, at its earlier instant.
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let wall = after.to_zoned(zone.clone()).datetime();
        let mut from = wall.to_zoned(TimeZone::UTC).ok()?.timestamp();
        // Only a fold can place a later wall-clock time at or before `after`.
        for _ in 0..=MAX_FOLD_MINUTES {
            let fire = self.0.find_next(from).ok()?;
            let instant = zone
                .to_ambiguous_zoned(fire.datetime())
                .compatible()
                .ok()?
                .timestamp();
            if instant > after {
                return Some(instant);
            }
            from = fire.timestamp();
        }
        None
    }
}

/// A schedule of five fields, in UTC (the window's zone is applied by [`Cron::next_after`]).
fn crontab(fields: &str) -> Result<cronexpr::Crontab, cronexpr::Error> {
    let mut options = cronexpr::ParseOptions::default();
    options.fallback_timezone_option = cronexpr::FallbackTimezoneOption::UTC;
    cronexpr::parse_crontab_with(fields, options)
}

/// The crate's reason, without its copy of the input and the caret under it.
fn reason(err: &cronexpr::Error) -> String {
    let text = err.to_string();
    match text.rsplit_once("^ ") {
        Some((_, why)) => why.to_owned(),
        None => text.replace('\n', " "),
    }
}

/// One field of robfig/cron's standard dialect, written so that cronexpr reads it the same
/// way, where the two read the same text differently:
///
/// * `?` is `*`, in every field;
/// * numbers and the field's three-letter names only: cronexpr's extensions (`L`, `W`, `#`,
///   `H`) are refused, as robfig refuses them;
/// * day of month and day of week: robfig takes a field for "any day" when any of its items is
///   a bare `*` (or `*/1`), cronexpr when the field starts with `*`; such a field is all values
///   anyway, so it is written as `*`. A stepped `*/n` is a restriction in robfig and "any day"
///   in cronexpr, so it is written as the range it steps over;
/// * day of week: robfig's steps run over 0-6 (7, Sunday again, is taken only alone or as a
///   range end), cronexpr's over 0-7, so `*/n` and `v/n` are written to end at 6.
fn robfig_field(index: usize, field: &str) -> Result<String, String> {
    let field = field.replace('?', "*");
    if let Some(c) = field
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '*' | ',' | '-' | '/')))
    {
        return Err(format!("{c:?} is not allowed"));
    }
    let names: &[&str] = match index {
        MONTH => &MONTH_NAMES,
        WEEKDAY => &WEEKDAY_NAMES,
        _ => &[],
    };
    if let Some(word) = field
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|w| !w.is_empty() && !names.iter().any(|n| n.eq_ignore_ascii_case(w)))
    {
        return Err(format!("{word:?} is not a number"));
    }
    let (low, high) = match index {
        2 => (1, 31),
        WEEKDAY => (0, 6),
        _ => return Ok(field),
    };
    let items: Vec<&str> = field.split(',').collect();
    let any_day = |item: &&str| match item.split_once('/') {
        None => *item == "*",
        Some((range, step)) => range == "*" && step.parse::<u64>() == Ok(1),
    };
    if items.iter().any(any_day) {
        return Ok("*".to_owned());
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(match item.split_once('/') {
            Some(("*", step)) => format!("{low}-{high}/{step}"),
            Some((start, step)) if index == WEEKDAY && !start.contains('-') => {
                if start.parse::<u64>().is_ok_and(|v| v > high) {
                    return Err(format!(
                        "a step must start at most at {high}; {start} is taken only alone or as a range end"
                    ));
                }
                format!("{start}-{high}/{step}")
            }
            _ => item.to_owned(),
        });
    }
    Ok(out.join(","))
}

#[cfg(test)]
mod tests;
