//! AppProject sync windows, evaluated as Argo CD evaluates them: a window is a cron schedule
//! (five fields, in the window's time zone) and a duration; it is active at `t` when some firing
//! time `s` of its schedule has `s <= t < s + duration`. Which windows apply to an application,
//! which are active, and whether a (manual or automated) sync may run now.
//!
//! Transport-free: the use cases read windows from the stored project JSON and ask here.

use std::time::Duration;

use jiff::Timestamp;
use jiff::civil;
use jiff::tz::TimeZone;
use serde::Deserialize;

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
    /// was validated) is never active: it neither blocks nor allows anything.
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
/// * else allow windows apply but none is active: only a manual sync, and only if one of those
///   inactive allow windows has `manualSync`;
/// * else (only inactive deny windows): yes.
pub fn can_sync(assigned: &[SyncWindow], now: Timestamp, manual: bool) -> bool {
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
        return manual && inactive_allows.any(|w| w.manual_sync);
    }
    true
}

/// The first window (active deny, or inactive allow) that keeps a manual sync from running now,
/// for the refusal message; `None` when a manual sync may run.
pub fn blocking_window(assigned: &[SyncWindow], now: Timestamp) -> Option<&SyncWindow> {
    if can_sync(assigned, now, true) {
        return None;
    }
    assigned
        .iter()
        .find(|w| w.is_deny() && w.active_at(now) && !w.manual_sync)
        .or_else(|| assigned.iter().find(|w| w.is_allow()))
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
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// 7 is also Sunday; folded onto 0 after parsing.
const WEEKDAY: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
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

    /// The first firing time strictly after `after`, searched in the civil time of `zone`, up
    /// to five years ahead. A civil time that a DST gap skips fires at the instant Argo CD's
    /// (Go's) normalization gives, the later side of the gap; one that a fold repeats fires
    /// once, at its earlier instant.
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
                let step: u32 = step
                    .parse()
                    .map_err(|_| bad(&format!("step {step:?} is not a number")))?;
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
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (
                value(a, field).map_err(|w| bad(&w))?,
                value(b, field).map_err(|w| bad(&w))?,
            )
        } else {
            let v = value(range, field).map_err(|w| bad(&w))?;
            (v, if step.is_some() { field.max } else { v })
        };
        if low > high {
            return Err(bad(&format!("range {range:?} runs backwards")));
        }
        let step = step.unwrap_or(1);
        let mut v = low;
        while v <= high {
            set |= 1 << v;
            v += step;
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
