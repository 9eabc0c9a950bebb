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
use jiff::civil;
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
        // Go's durations have no day unit (the configuration's parser also takes `d`).
        if self.duration.contains('d') {
            return Err(format!(
                "invalid duration {:?}: no unit d; write days as hours (24h)",
                self.duration
            ));
        }
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

/// A five-field cron schedule (minute hour day-of-month month day-of-week), each field a set
/// of allowed values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Day-of-month or day-of-week was written as `*` or `?`: then a day must match both
    /// fields; when both are restricted, matching either is enough (classic cron).
    any_day_star: bool,
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// The last value `*` and `v/step` run to: `max`, except for the day of week, where 7
    /// (Sunday again) is taken only as a literal or a range end and steps run over 0-6.
    step_max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    step_max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    step_max: 23,
    names: &[],
};
const DAY: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    step_max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    step_max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// 7 is also Sunday; folded onto 0 after parsing.
const WEEKDAY: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
    step_max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Cron {
    pub fn parse(schedule: &str) -> Result<Self, String> {
        let bad = |why: String| format!("schedule {schedule:?} is not a cron schedule: {why}");
        let fields: Vec<&str> = schedule.split_whitespace().collect();
        if schedule.trim_start().starts_with('@') {
            return Err(bad(
                "descriptors such as @daily are not accepted; write five fields such as \"0 0 * * *\""
                    .to_owned(),
            ));
        }
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(bad(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            )));
        };
        let (minutes, _) = parse_field(minute, &MINUTE).map_err(bad)?;
        let (hours, _) = parse_field(hour, &HOUR).map_err(bad)?;
        let (days, day_star) = parse_field(day, &DAY).map_err(bad)?;
        let (months, _) = parse_field(month, &MONTH).map_err(bad)?;
        let (mut weekdays, weekday_star) = parse_field(weekday, &WEEKDAY).map_err(bad)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        Ok(Self {
            minutes,
            hours,
            days,
            months,
            weekdays,
            any_day_star: day_star || weekday_star,
        })
    }

    fn day_matches(&self, date: civil::Date) -> bool {
        let dom = bit(self.days, date.day());
        let dow = bit(self.weekdays, date.weekday().to_sunday_zero_offset());
        if self.any_day_star { dom && dow } else { dom || dow }
    }

    /// The first firing time strictly after `after`, searched in the real local (wall-clock)
    /// time of `zone`, up to five years ahead; `None` when the schedule does not fire in that
    /// time, and then the window is never active. Both differ from Argo CD on purpose (see the
    /// module documentation): robfig/cron applies the zone's offset rather than its local time,
    /// and upstream treats a window whose schedule never fires as always active. A civil time
    /// that a DST gap skips fires on the later side of the gap (the `compatible` rule, as Go's
    /// time normalization does); one that a fold repeats fires once, at its earlier instant.
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let start = after.to_zoned(zone.clone()).datetime();
        let mut at = Civil {
            year: start.year(),
            month: start.month(),
            day: start.day(),
            hour: start.hour(),
            minute: start.minute(),
        };
        at.next_minute();
        let last_year = at.year.saturating_add(5);
        while at.year <= last_year {
            if !bit(self.months, at.month) {
                at.next_month();
                continue;
            }
            let date = civil::Date::new(at.year, at.month, at.day).ok()?;
            if !self.day_matches(date) {
                at.next_day();
                continue;
            }
            if !bit(self.hours, at.hour) {
                at.next_hour();
                continue;
            }
            if !bit(self.minutes, at.minute) {
                at.next_minute();
                continue;
            }
            let wall = date.at(at.hour, at.minute, 0, 0);
            let instant = zone.to_ambiguous_zoned(wall).compatible().ok()?.timestamp();
            if instant > after {
                return Some(instant);
            }
            at.next_minute();
        }
        None
    }
}

fn bit<T: Into<i64>>(set: u64, value: T) -> bool {
    u32::try_from(value.into()).is_ok_and(|v| v < 64 && set & (1 << v) != 0)
}

/// One field: a comma-separated list of `*`, `?`, `v`, `a-b`, each optionally `/step`; `v/step`
/// means `v-max/step`. Names (`jan`, `mon`) where the field has them. Returns the set and
/// whether the field was a bare `*` or `?` (a step over `*` is a restriction).
fn parse_field(text: &str, field: &Field) -> Result<(u64, bool), String> {
    let mut set = 0u64;
    let mut star = false;
    for part in text.split(',') {
        let bad = |why: &str| format!("{} field {text:?}: {why}", field.name);
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = match step.parse() {
                    Ok(n) => n,
                    Err(_) if !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit()) => {
                        return Err(bad(&format!("step {step} is too large")));
                    }
                    Err(_) => return Err(bad(&format!("step {step:?} is not a number"))),
                };
                if step == 0 {
                    return Err(bad("a step must be at least 1"));
                }
                (range, Some(step))
            }
            None => (part, None),
        };
        let (low, high) = if range == "*" || range == "?" {
            if step.is_none_or(|s| s == 1) {
                star = true;
            }
            (field.min, field.step_max)
        } else if let Some((a, b)) = range.split_once('-') {
            (
                value(a, field).map_err(|w| bad(&w))?,
                value(b, field).map_err(|w| bad(&w))?,
            )
        } else {
            let v = value(range, field).map_err(|w| bad(&w))?;
            if step.is_some() && v > field.step_max {
                return Err(bad(&format!(
                    "a step must start at most at {}; {v} is taken only alone or as a range end",
                    field.step_max
                )));
            }
            (v, if step.is_some() { field.step_max } else { v })
        };
        if low > high {
            return Err(bad(&format!("range {range:?} runs backwards")));
        }
        let step = step.unwrap_or(1);
        let mut v = Some(low);
        while let Some(x) = v.filter(|x| *x <= high) {
            set |= 1 << x;
            v = x.checked_add(step);
        }
    }
    Ok((set, star))
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(index) = field.names.iter().position(|n| *n == lower) {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        // Months are named from 1, weekdays from 0.
        return Ok(index + u32::from(field.min == 1));
    }
    let v: u32 = text.parse().map_err(|_| {
        if text.is_empty() {
            "an empty value".to_owned()
        } else {
            format!("{text:?} is not a number")
        }
    })?;
    if v < field.min || v > field.max {
        return Err(format!("{v} is out of range {}-{}", field.min, field.max));
    }
    Ok(v)
}

/// A civil minute being searched; fields are always a valid date and time.
struct Civil {
    year: i16,
    month: i8,
    day: i8,
    hour: i8,
    minute: i8,
}

impl Civil {
    fn next_minute(&mut self) {
        if self.minute == 59 {
            self.next_hour();
        } else {
            self.minute += 1;
        }
    }

    fn next_hour(&mut self) {
        self.minute = 0;
        if self.hour == 23 {
            self.next_day();
        } else {
            self.hour += 1;
        }
    }

    fn next_day(&mut self) {
        self.minute = 0;
        self.hour = 0;
        let last = civil::Date::new(self.year, self.month, 1)
            .map(|d| d.days_in_month())
            .unwrap_or(28);
        if self.day >= last {
            self.next_month();
        } else {
            self.day += 1;
        }
    }

    fn next_month(&mut self) {
        self.minute = 0;
        self.hour = 0;
        self.day = 1;
        if self.month == 12 {
            self.month = 1;
            self.year = self.year.saturating_add(1);
        } else {
            self.month += 1;
        }
    }
}

#[cfg(test)]
mod tests;
