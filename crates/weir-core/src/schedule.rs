//! Schedules: a cron expression read in a time zone, and the ticks it fires at.
//!
//! Expressions have five fields (minute, hour, day of month, month, day of week) or six (a
//! leading second), with names (`MON-FRI`, `JAN`), ranges, steps, lists and `@hourly`-style
//! aliases. Daylight-saving changes follow the zone's rules: a fixed time that a spring
//! change skips (02:30 on the night the clocks go from 02:00 to 03:00) fires once, at the
//! first time after the gap (03:00); a fixed time that an autumn change repeats fires once,
//! at its first occurrence. Every wall-clock time fires once, intervals included: in the
//! hour an autumn change repeats, `*/15 * * * *` fires four times, not eight.

use chrono::{DateTime, SubsecRound, Utc};

/// A parsed schedule: its expression and zone, ready to compute ticks.
#[derive(Debug, Clone)]
pub struct Cron {
    cron: croner::Cron,
    zone: chrono_tz::Tz,
}

impl Cron {
    /// Parses `expr` in the IANA time zone `zone` (`Europe/Paris`, `UTC`); `Err` says what
    /// is wrong, in words a workflow's author can act on.
    pub fn parse(expr: &str, zone: &str) -> Result<Self, String> {
        let zone: chrono_tz::Tz = zone.parse().map_err(|_| {
            format!("`{zone}` is not an IANA time zone (like UTC, Europe/Paris, America/New_York)")
        })?;
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(expr.trim())
            .map_err(|e| format!("`{expr}` is not a cron expression: {e}"))?;
        Ok(Self { cron, zone })
    }

    /// The first tick strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Ticks fall on whole seconds: from 08:59:59.6 the next is 09:00:00, not 09:00:00.6.
        self.cron
            .find_next_occurrence(&t.trunc_subsecs(0).with_timezone(&self.zone), false)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The last tick at or before `t`. Ticks fall on whole seconds; croner's backward
    /// search is only a starting point (it can land early around a daylight-saving gap), and
    /// the forward search from just before it decides.
    pub fn last_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = t.trunc_subsecs(0);
        let start = self
            .cron
            .find_previous_occurrence(&t.with_timezone(&self.zone), true)
            .ok()?
            .with_timezone(&Utc);
        let mut best = None;
        let mut at = start - chrono::Duration::seconds(1);
        while let Some(next) = self.next_after(at).filter(|n| *n <= t) {
            best = Some(next);
            at = next;
        }
        best
    }

    /// The next `n` ticks after `t`.
    pub fn upcoming(&self, t: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n);
        let mut at = t;
        while out.len() < n {
            match self.next_after(at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    /// The zone's name.
    pub fn zone(&self) -> &str {
        self.zone.name()
    }

    /// A tick as the zone's wall clock reads it (`2027-03-28T03:00:00+02:00`).
    pub fn local(&self, t: DateTime<Utc>) -> String {
        t.with_timezone(&self.zone).to_rfc3339()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    #[test]
    fn weekday_mornings_in_a_zone() {
        let c = Cron::parse("0 9 * * MON-FRI", "Europe/Paris").unwrap();
        // Friday 2027-01-08 10:00 Paris (09:00 UTC): the next is Monday 09:00 Paris.
        let next = c.next_after(utc(2027, 1, 8, 9, 0)).unwrap();
        assert_eq!(next, utc(2027, 1, 11, 8, 0));
        assert_eq!(c.local(next), "2027-01-11T09:00:00+01:00");
        assert_eq!(c.last_at_or_before(next), Some(next));
    }

    #[test]
    fn a_time_the_spring_change_skips_fires_once_after_the_gap() {
        // Paris goes from 02:00 to 03:00 on 2027-03-28: 02:30 does not exist that day.
        let c = Cron::parse("30 2 * * *", "Europe/Paris").unwrap();
        let ticks = c.upcoming(utc(2027, 3, 26, 12, 0), 3);
        let local: Vec<String> = ticks.iter().map(|t| c.local(*t)).collect();
        assert_eq!(
            local,
            [
                "2027-03-27T02:30:00+01:00",
                "2027-03-28T03:00:00+02:00",
                "2027-03-29T02:30:00+02:00"
            ]
        );
    }

    #[test]
    fn a_time_the_autumn_change_repeats_fires_once() {
        // Paris goes from 03:00 back to 02:00 on 2027-10-31: 02:30 happens twice.
        let c = Cron::parse("30 2 * * *", "Europe/Paris").unwrap();
        let ticks = c.upcoming(utc(2027, 10, 30, 12, 0), 2);
        let local: Vec<String> = ticks.iter().map(|t| c.local(*t)).collect();
        assert_eq!(
            local,
            ["2027-10-31T02:30:00+02:00", "2027-11-01T02:30:00+01:00"]
        );
    }

    #[test]
    fn seconds_are_optional_and_mistakes_are_explained() {
        let c = Cron::parse("* * * * * *", "UTC").unwrap();
        let t = utc(2027, 1, 1, 0, 0);
        assert_eq!(c.next_after(t), Some(t + chrono::Duration::seconds(1)));
        let late = t + chrono::Duration::milliseconds(600);
        assert_eq!(
            c.next_after(late),
            Some(t + chrono::Duration::seconds(1)),
            "whole seconds"
        );
        let e = Cron::parse("0 9 * *", "UTC").unwrap_err();
        assert!(e.contains("not a cron expression"), "{e}");
        let e = Cron::parse("0 9 * * *", "Paris").unwrap_err();
        assert!(e.contains("IANA time zone"), "{e}");
    }
}
