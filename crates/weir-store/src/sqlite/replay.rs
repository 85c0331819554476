//! What a redo log record holds (`redo.rs`): the fenced writes of one group commit, each
//! as its fields, length-prefixed, and their replay. A write's rows are text already (JSON
//! the store binds as it is), so a record copies them; nothing is escaped or parsed.

use std::borrow::Cow;

use weir_core::store::StoreError;

use super::drive::{self, EndRow, FencedWrite, Seen, StepRow};
use super::stmts::Conn;

/// A record's one kind of write.
const FENCED: u8 = 1;

/// Appends a group's writes, each encoded by [`encode`], to `out` (cleared first).
pub fn group<'a>(out: &mut Vec<u8>, writes: impl ExactSizeIterator<Item = &'a [u8]>) {
    out.clear();
    out.extend_from_slice(&(writes.len() as u32).to_le_bytes());
    for w in writes {
        out.extend_from_slice(&(w.len() as u32).to_le_bytes());
        out.extend_from_slice(w);
    }
}

/// A fenced write, for the log.
pub fn encode(w: &FencedWrite) -> Vec<u8> {
    let mut e = Enc(Vec::with_capacity(
        256 + w.events.len()
            + w.snapshot.as_ref().map_or(0, String::len)
            + w.patch.as_ref().map_or(0, String::len)
            + w.steps
                .iter()
                .map(|s| s.input.len() + s.output.len() + s.attempts.len() + 128)
                .sum::<usize>()
            + w.running.as_ref().map_or(0, |(d, a)| d.len() + a.len()),
    ));
    e.0.push(FENCED);
    e.str(&w.run_id);
    match w.seen {
        Some(s) => {
            e.0.push(1);
            e.i64(s.key);
            e.i64(s.event_seq);
            e.0.push(u8::from(s.cancel));
        }
        None => e.0.push(0),
    }
    e.i64(w.epoch);
    e.str(&w.owner);
    e.str(&w.write);
    e.0.push(u8::from(w.visible));
    e.opt_str(w.snapshot.as_deref());
    e.opt_str(w.patch.as_deref());
    e.opt_f64(w.cost_usd);
    e.0.push(u8::from(w.clear));
    e.0.extend_from_slice(&(w.steps.len() as u32).to_le_bytes());
    for s in &w.steps {
        e.i64(s.seq);
        e.str(&s.node_id);
        e.str(&s.node_type);
        e.i64(s.visit);
        e.str(&s.status);
        e.opt_str(s.route.as_deref());
        e.str(&s.input);
        e.str(&s.output);
        e.opt_str(s.error.as_deref());
        e.0.extend_from_slice(&s.cost_usd.to_le_bytes());
        e.i64(s.tokens_in);
        e.i64(s.tokens_out);
        e.str(&s.started_at);
        e.opt_str(s.finished_at.as_deref());
        e.opt_i64(s.duration_ms);
        e.str(&s.attempts);
    }
    match &w.running {
        Some((done, add)) => {
            e.0.push(1);
            e.str(done);
            e.str(add);
        }
        None => e.0.push(0),
    }
    e.i64(w.event_count);
    e.str(&w.events);
    match &w.end {
        None => e.0.push(0),
        Some(EndRow::Finish {
            status,
            error,
            finished_at,
        }) => {
            e.0.push(1);
            e.str(status);
            e.opt_str(error.as_deref());
            e.opt_str(finished_at.as_deref());
        }
        Some(EndRow::Release) => e.0.push(2),
    }
    e.0
}

fn decode(bytes: &[u8]) -> Result<FencedWrite, StoreError> {
    let mut d = Dec(bytes);
    if d.u8()? != FENCED {
        return Err(bad("an unknown kind of write"));
    }
    let run_id = d.string()?;
    let seen = match d.u8()? {
        0 => None,
        _ => Some(Seen {
            key: d.i64()?,
            event_seq: d.i64()?,
            cancel: d.u8()? != 0,
        }),
    };
    let epoch = d.i64()?;
    let owner = d.string()?;
    let write = Cow::Owned(d.string()?);
    let visible = d.u8()? != 0;
    let snapshot = d.opt_string()?;
    let patch = d.opt_string()?;
    let cost_usd = d.opt_f64()?;
    let clear = d.u8()? != 0;
    let count = d.u32()? as usize;
    let mut steps = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        steps.push(StepRow {
            seq: d.i64()?,
            node_id: d.string()?,
            node_type: Cow::Owned(d.string()?),
            visit: d.i64()?,
            status: Cow::Owned(d.string()?),
            route: d.opt_string()?,
            input: d.string()?,
            output: d.string()?,
            error: d.opt_string()?,
            cost_usd: d.f64()?,
            tokens_in: d.i64()?,
            tokens_out: d.i64()?,
            started_at: d.string()?,
            finished_at: d.opt_string()?,
            duration_ms: d.opt_i64()?,
            attempts: d.string()?,
        });
    }
    let running = match d.u8()? {
        0 => None,
        _ => Some((d.string()?, d.string()?)),
    };
    let event_count = d.i64()?;
    let events = d.string()?;
    let end = match d.u8()? {
        0 => None,
        1 => Some(EndRow::Finish {
            status: Cow::Owned(d.string()?),
            error: d.opt_string()?,
            finished_at: d.opt_string()?,
        }),
        _ => Some(EndRow::Release),
    };
    if !d.0.is_empty() {
        return Err(bad("bytes after its last field"));
    }
    Ok(FencedWrite {
        run_id,
        seen,
        epoch,
        owner,
        write,
        visible,
        snapshot,
        patch,
        cost_usd,
        clear,
        steps,
        running,
        event_count,
        events,
        end,
    })
}

/// Replays a record's writes, each in a savepoint of its own (as a group whose write failed
/// commits them): the writes of a group were all kept when its record was logged, so one
/// that fails now is reported and the others stay. How many failed.
pub fn replay(conn: &Conn<'_>, payload: &[u8]) -> Result<usize, StoreError> {
    let mut d = Dec(payload);
    let count = d.u32()?;
    let mut failed = 0;
    for _ in 0..count {
        let len = d.u32()? as usize;
        let bytes = d.take(len)?;
        let w = decode(bytes)?;
        conn.execute_batch("SAVEPOINT r")
            .map_err(super::writer::backend)?;
        let kept = matches!(drive::fenced(conn, &w), Ok(Ok(_)));
        let end = if kept {
            "RELEASE r"
        } else {
            "ROLLBACK TO r; RELEASE r"
        };
        conn.execute_batch(end).map_err(super::writer::backend)?;
        if !kept {
            tracing::warn!(run = %w.run_id, write = %w.write, "a write of the redo log was not applied again");
            failed += 1;
        }
    }
    Ok(failed)
}

fn bad(what: &str) -> StoreError {
    StoreError::Backend(format!("redo log record: {what}"))
}

struct Enc(Vec<u8>);

impl Enc {
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.0.push(1);
                self.str(s);
            }
            None => self.0.push(0),
        }
    }

    fn opt_i64(&mut self, v: Option<i64>) {
        match v {
            Some(v) => {
                self.0.push(1);
                self.i64(v);
            }
            None => self.0.push(0),
        }
    }

    fn opt_f64(&mut self, v: Option<f64>) {
        match v {
            Some(v) => {
                self.0.push(1);
                self.0.extend_from_slice(&v.to_le_bytes());
            }
            None => self.0.push(0),
        }
    }
}

struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.0.len() < n {
            return Err(bad("cut short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn i64(&mut self) -> Result<i64, StoreError> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn f64(&mut self) -> Result<f64, StoreError> {
        Ok(f64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn string(&mut self) -> Result<String, StoreError> {
        let n = self.u32()? as usize;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| bad("text that is not UTF-8"))
    }

    fn opt_string(&mut self) -> Result<Option<String>, StoreError> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.string()?),
        })
    }

    fn opt_i64(&mut self) -> Result<Option<i64>, StoreError> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.i64()?),
        })
    }

    fn opt_f64(&mut self) -> Result<Option<f64>, StoreError> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.f64()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write() -> FencedWrite {
        FencedWrite {
            run_id: "r1".into(),
            seen: Some(Seen {
                key: 7,
                event_seq: 41,
                cancel: false,
            }),
            epoch: 3,
            owner: "w1".into(),
            write: "step".into(),
            visible: false,
            snapshot: None,
            patch: Some(r#"{"state":{"a":"\"quoted\"\n"}}"#.into()),
            cost_usd: Some(0.25),
            clear: true,
            steps: vec![StepRow {
                seq: 2,
                node_id: "n1".into(),
                node_type: "agent".into(),
                visit: 1,
                status: "succeeded".into(),
                route: None,
                input: "{}".into(),
                output: "{\"x\":1}".into(),
                error: Some("e".into()),
                cost_usd: 0.5,
                tokens_in: 10,
                tokens_out: 20,
                started_at: "t0".into(),
                finished_at: Some("t1".into()),
                duration_ms: Some(12),
                attempts: "[]".into(),
            }],
            running: Some(("2".into(), "{\"seq\":3}\n".into())),
            event_count: 2,
            events: "[..]".into(),
            end: Some(EndRow::Finish {
                status: "succeeded".into(),
                error: None,
                finished_at: Some("t2".into()),
            }),
        }
    }

    #[test]
    fn a_write_reads_back_as_it_was_written_and_a_cut_one_is_refused() {
        let bytes = encode(&write());
        let back = decode(&bytes).expect("decodes");
        assert_eq!(encode(&back), bytes, "every field survives the trip");
        assert_eq!(back.steps[0].output, "{\"x\":1}");
        assert_eq!(back.seen, write().seen);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }
}
