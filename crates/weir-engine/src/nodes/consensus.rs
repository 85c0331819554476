//! `consensus` (spec 000): `agentCount` agents answer the same prompt in parallel, each in
//! its mode's JSON envelope (retried up to `maxRetries`), and the group decides:
//! - `boolean` / `confidence` are gates: an agent approves with `result: true` / a score at
//!   or above the threshold; `approved` once `quorum` agents approve, else `rejected`;
//! - `answer`: plurality over the answers (trimmed, case-insensitive); `decided` when one
//!   answer has the most votes alone and at least `quorum` of them, else `undecided`;
//! - `most_consistent`: a separate aggregation call picks the answer most consistent with the
//!   others and says how many agree with it; `decided` when at least `quorum` do.
//!
//! Output (in `variables.<id>`): `{decision, votes, quorum, agent_count}` plus `approvals` for
//! gates and `answer` / `count` for the answer modes.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::task::JoinSet;
use weir_core::ModelRequest;
use weir_core::ir::{ConsensusMode, ConsensusSpec};
use weir_core::model::Message;

use super::{Failure, NodeCtx, Outcome, Route, Spent, model_failure, render};
use crate::structured::{self, StructuredError};
use crate::validators::Envelope;

fn envelope(mode: &ConsensusMode) -> Envelope {
    match mode {
        ConsensusMode::Boolean => Envelope::Boolean,
        ConsensusMode::Confidence { .. } => Envelope::Score,
        ConsensusMode::Answer { choices } => Envelope::Answer(choices.clone()),
        ConsensusMode::MostConsistent => Envelope::Answer(None),
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "a consensus node in order: fan out the voters, gather, tally by the mode, the judge's tie-break, the outcome; the modes share the tallies built at the top"
)]
pub async fn execute(ctx: &NodeCtx, spec: &ConsensusSpec) -> Result<Outcome, Failure> {
    let env = envelope(&spec.mode);
    let prompt = render(ctx, &spec.prompt, "prompt")?;
    let system = spec
        .system
        .as_ref()
        .map(|t| render(ctx, t, "system"))
        .transpose()?;
    let user = env.prompt(&prompt);
    let request =
        json!({"model": spec.model, "system": system, "user": user, "agents": spec.agent_count});
    let base = ModelRequest {
        model: spec.model.clone(),
        system: system.clone(),
        messages: vec![Message::user(user)],
        temperature: spec.temperature,
        max_tokens: None,
        timeout: ctx.call_timeout(),
        fallback_models: Vec::new(),
        fallback_error_classes: None,
        response_schema: Some(env.schema()),
        on_fallback: None,
        tools: Vec::new(),
        tool_choice: weir_core::model::ToolChoice::Auto,
        parallel_tool_calls: true,
        on_delta: None,
    };
    // The agents ask at once; their results are taken in agent order, so the record lists
    // each agent's calls together and in that order (and a replay, which asks one agent
    // after another, finds each agent's own).
    let mut results: Vec<Option<_>> = (0..spec.agent_count).map(|_| None).collect();
    if ctx.replay {
        for slot in &mut results {
            let mut spent = Spent::default();
            let r = structured::ask(
                ctx.services.models.as_ref(),
                base.clone(),
                &env,
                spec.max_retries,
                &mut spent,
            )
            .await;
            *slot = Some((r, spent));
        }
    } else {
        let mut agents = JoinSet::new();
        for i in 0..spec.agent_count {
            let models = ctx.services.models.clone();
            let req = base.clone();
            let env = env.clone();
            let retries = spec.max_retries;
            agents.spawn(async move {
                let mut spent = Spent::default();
                let r = structured::ask(models.as_ref(), req, &env, retries, &mut spent).await;
                (i, r, spent)
            });
        }
        // A panicked agent leaves its vote missing; it is reported below, never dropped.
        while let Some(joined) = agents.join_next().await {
            if let Ok((i, r, s)) = joined {
                results[i as usize] = Some((r, s));
            }
        }
    }
    let mut spent = Spent::default();
    let mut answers: BTreeMap<u32, Value> = BTreeMap::new();
    let mut failure = None;
    for (i, slot) in results.into_iter().enumerate() {
        let Some((result, s)) = slot else { continue };
        let i = i as u32;
        spent.merge(s);
        match result {
            Ok(a) => {
                let mut vote = a.parsed;
                vote["agent"] = json!(i + 1);
                answers.insert(i, vote);
            }
            Err(e) if failure.is_none() => failure = Some((i, e)),
            Err(_) => {}
        }
    }
    if let Some((i, e)) = failure {
        return Err(match e {
            StructuredError::Model(e) => {
                let mut f = model_failure(e, request, spent);
                f.message = format!("agent {}: {}", i + 1, f.message);
                f
            }
            StructuredError::Invalid { errors, repairs } => {
                let mut f = super::invalid_reply(errors, repairs, false, request, spent);
                f.message = format!("agent {}: {}", i + 1, f.message);
                f
            }
        });
    }
    if let Some(i) = (0..spec.agent_count).find(|i| !answers.contains_key(i)) {
        return Err(Failure::internal(
            format!("agent {}: its call panicked, so its vote is missing", i + 1),
            request,
            spent,
        ));
    }
    let votes: Vec<Value> = answers.into_values().collect();
    let mut output =
        json!({"votes": votes, "quorum": spec.quorum, "agent_count": spec.agent_count});
    let decision = match &spec.mode {
        ConsensusMode::Boolean | ConsensusMode::Confidence { .. } => {
            let approvals = votes
                .iter()
                .filter(|v| match &spec.mode {
                    ConsensusMode::Confidence { threshold } => {
                        v["score"].as_f64().unwrap_or(0.0) >= *threshold
                    }
                    _ => v["result"].as_bool().unwrap_or(false),
                })
                .count() as u32;
            output["approvals"] = json!(approvals);
            if approvals >= spec.quorum {
                "approved"
            } else {
                "rejected"
            }
        }
        ConsensusMode::Answer { .. } => {
            let mut tally: BTreeMap<String, (u32, String)> = BTreeMap::new();
            for v in &votes {
                let a = v["answer"].as_str().unwrap_or_default();
                let e = tally
                    .entry(a.trim().to_lowercase())
                    .or_insert((0, a.trim().to_string()));
                e.0 += 1;
            }
            let best = tally.values().map(|(c, _)| *c).max().unwrap_or(0);
            let leaders: Vec<&(u32, String)> = tally.values().filter(|(c, _)| *c == best).collect();
            output["tally"] = json!(
                tally
                    .values()
                    .map(|(c, a)| json!({"answer": a, "votes": c}))
                    .collect::<Vec<_>>()
            );
            output["count"] = json!(best);
            if leaders.len() == 1 && best >= spec.quorum {
                output["answer"] = json!(leaders[0].1);
                "decided"
            } else {
                output["answer"] = Value::Null;
                "undecided"
            }
        }
        ConsensusMode::MostConsistent => {
            let pick = Envelope::Pick(votes.len());
            let listing: String = votes
                .iter()
                .enumerate()
                .map(|(i, v)| format!("[{}] {}\n", i + 1, v["answer"].as_str().unwrap_or_default()))
                .collect();
            let user = pick.prompt(&format!(
                "{prompt}\n\nSeveral independent answers were given to the question above:\n{listing}\nPick the answer that is most consistent with the others."
            ));
            let req = ModelRequest {
                messages: vec![Message::user(user)],
                response_schema: Some(pick.schema()),
                ..base.clone()
            };
            let chosen = match structured::ask(
                ctx.services.models.as_ref(),
                req,
                &pick,
                spec.max_retries,
                &mut spent,
            )
            .await
            {
                Ok(a) => a.parsed,
                Err(StructuredError::Model(e)) => return Err(model_failure(e, request, spent)),
                Err(StructuredError::Invalid { errors, repairs }) => {
                    let mut f = super::invalid_reply(errors, repairs, false, request, spent);
                    f.message = format!("aggregation: {}", f.message);
                    return Err(f);
                }
            };
            let index = chosen["index"].as_u64().unwrap_or(1) as usize;
            let agreeing = chosen["agreeing"].as_u64().unwrap_or(0) as u32;
            output["answer"] = votes[index - 1]["answer"].clone();
            output["chosen"] = json!(index);
            output["count"] = json!(agreeing);
            output["aggregation"] = chosen;
            if agreeing >= spec.quorum {
                "decided"
            } else {
                "undecided"
            }
        }
    };
    output["decision"] = json!(decision);
    Ok(Outcome {
        write: None,
        route: Route::Key(decision.to_string()),
        request: Some(request.into()),
        response: None,
        output: output.into(),
        spent,
    })
}
