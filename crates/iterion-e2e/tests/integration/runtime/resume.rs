//! Pause and resume (issue 14 item 6): a human node without a prompter
//! pauses the run; `Engine::resume` continues a paused, failed or
//! interrupted run from its stored progress without running finished
//! nodes again; bad input is a typed refusal that changes nothing.

use std::collections::BTreeMap;

use iterion_core::{NodeId, RunId, RunStatus};
use iterion_runtime::human::AnswerInput;
use iterion_runtime::resume::{self, ResumeError};
use iterion_runtime::{RunOutcome, SandboxFlags};
use tokio_util::sync::CancellationToken;

use crate::runtime::support::{Harness, compile};

const GATED: &str = r#"
schema n_out:
  n: int

schema verdict:
  approved: bool
  note: string

schema ok_out:
  ok: bool

tool prep:
  command: `echo x >> prep.count; echo '{"n": 1}'`
  output: n_out

human gate:
  output: verdict
  instructions: "approve the plan?"

tool after:
  command: `echo {{outputs.gate.note}} >> after.log; if [ -e fail.once ]; then rm fail.once; exit 3; fi; echo '{"ok": true}'`
  output: ok_out

workflow gated:
  entry: prep
  prep -> gate
  gate -> after when approved
  gate -> fail when not approved
  after -> done
"#;

fn text(pairs: &[(&str, &str)]) -> BTreeMap<String, AnswerInput> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), AnswerInput::Text((*v).to_owned())))
        .collect()
}

fn lines(h: &Harness, file: &str) -> usize {
    std::fs::read_to_string(h.workspace.path().join(file))
        .unwrap_or_default()
        .lines()
        .count()
}

async fn start(h: &Harness, source: &str) -> RunOutcome {
    let mut options = h.options(compile(source));
    options.source_sha256 = Some("sha-at-launch".into());
    h.run_with(options, CancellationToken::new()).await
}

async fn resume(
    h: &Harness,
    run: &RunId,
    sha: &str,
    force: bool,
    answers: &BTreeMap<String, AnswerInput>,
) -> Result<RunOutcome, ResumeError> {
    let plan =
        resume::load(h.store.as_ref(), run)
            .await?
            .plan(compile(GATED), sha, force, answers)?;
    Ok(h.engine
        .resume(plan, SandboxFlags::default(), CancellationToken::new())
        .await
        .expect("engine resume"))
}

async fn status(h: &Harness, run: &RunId) -> RunStatus {
    h.store.load_run(run).await.unwrap().unwrap().status
}

#[tokio::test]
async fn a_human_node_pauses_and_resume_continues_without_rerunning() {
    let h = Harness::new();
    let out = start(&h, GATED).await;
    assert_eq!(
        (out.status, out.failure.as_ref()),
        (RunStatus::PausedWaitingHuman, None)
    );
    let asked = h.of_kind(&out.run_id, "human_input_requested").await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].node_id, Some(NodeId::new("gate")));
    assert_eq!(
        asked[0].data["fields"],
        serde_json::json!(["approved", "note"])
    );
    assert_eq!(
        asked[0].data["questions"]["instructions"],
        "approve the plan?"
    );
    assert_eq!(h.of_kind(&out.run_id, "run_paused").await.len(), 1);
    assert_eq!(lines(&h, "prep.count"), 1);

    // Bad answers are typed refusals, and the run stays paused.
    for (answers, code) in [
        (text(&[]), "answers_missing"),
        (text(&[("aproved", "true")]), "answer_unknown_field"),
        (
            text(&[("approved", "maybe"), ("note", "x")]),
            "answer_wrong_type",
        ),
        (text(&[("approved", "true")]), "answers_incomplete"),
    ] {
        let e = resume(&h, &out.run_id, "sha-at-launch", false, &answers)
            .await
            .expect_err(code);
        assert_eq!(e.code(), code, "{e}");
        assert!(e.is_user_input());
    }
    // A changed source is refused unless forced.
    let e = resume(
        &h,
        &out.run_id,
        "sha-now",
        false,
        &text(&[("approved", "true")]),
    )
    .await
    .expect_err("changed source");
    assert_eq!(e.code(), "resume_source_changed", "{e}");
    assert_eq!(status(&h, &out.run_id).await, RunStatus::PausedWaitingHuman);

    // Answered, it goes on — and fails once at `after`.
    std::fs::write(h.workspace.path().join("fail.once"), "").unwrap();
    let answers = text(&[("approved", "true"), ("note", "ship it")]);
    let failed = resume(&h, &out.run_id, "sha-now", true, &answers)
        .await
        .unwrap();
    assert_eq!(failed.run_id, out.run_id);
    assert_eq!(failed.status, RunStatus::Failed, "{:?}", failed.failure);
    let resumed = h.of_kind(&out.run_id, "run_resumed").await;
    assert_eq!(resumed[0].data["resumed_from"], "paused_waiting_human");
    assert_eq!(resumed[0].data["restart_node"], "gate");
    assert_eq!(resumed[0].data["forced"], true);
    let recorded = h.of_kind(&out.run_id, "human_answers_recorded").await;
    assert_eq!(recorded[0].node_id, Some(NodeId::new("gate")));
    assert_eq!(
        recorded[0].data["answers"],
        serde_json::json!({"approved": true, "note": "ship it"})
    );
    // Answers for a run that is not waiting for any are refused.
    let e = resume(&h, &out.run_id, "sha-now", true, &answers)
        .await
        .expect_err("not waiting");
    assert_eq!(e.code(), "resume_answers_not_expected", "{e}");

    // The failed run resumes at the failed node: prep and gate do not run
    // again, gate's answers still feed `after`.
    let done = resume(&h, &out.run_id, "sha-now", true, &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Finished, "{:?}", done.failure);
    assert_eq!(lines(&h, "prep.count"), 1);
    let log = std::fs::read_to_string(h.workspace.path().join("after.log")).unwrap();
    assert_eq!(log, "ship it\nship it\n");
    let resumed = h.of_kind(&out.run_id, "run_resumed").await;
    assert_eq!(resumed[1].data["resumed_from"], "failed");
    assert_eq!(resumed[1].data["restart_node"], "after");
    let started: Vec<_> = h
        .of_kind(&out.run_id, "node_started")
        .await
        .into_iter()
        .filter_map(|e| e.node_id.map(|n| n.to_string()))
        .collect();
    assert_eq!(started, ["prep", "gate", "after", "after"]);

    // A finished run and an unknown one are refused.
    let e = resume(&h, &out.run_id, "sha-now", true, &BTreeMap::new())
        .await
        .expect_err("finished");
    assert_eq!(e.code(), "resume_not_resumable", "{e}");
    let e = resume(&h, &RunId::generate(), "sha-now", true, &BTreeMap::new())
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), "resume_unknown_run", "{e}");
}

#[tokio::test]
async fn a_reopened_run_belongs_to_the_resuming_process() {
    let h = Harness::new();
    let out = start(&h, GATED).await;
    let plan = resume::load(h.store.as_ref(), &out.run_id)
        .await
        .unwrap()
        .plan(
            compile(GATED),
            "sha-at-launch",
            false,
            &text(&[("approved", "false"), ("note", "no")]),
        )
        .unwrap();
    let end = h
        .engine
        .resume(plan, SandboxFlags::default(), CancellationToken::new())
        .await
        .unwrap();
    // `approved: false` routes to fail: WORKFLOW_FAILED, which no resume
    // reopens.
    assert_eq!(end.status, RunStatus::Failed);
    let record = h.store.load_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(
        record.owner,
        Some(iterion_runtime::owner::current_owner().unwrap())
    );
    let e = resume(&h, &out.run_id, "sha-at-launch", false, &BTreeMap::new())
        .await
        .expect_err("fail node");
    assert_eq!(e.code(), "resume_workflow_failed", "{e}");
}

const FORK: &str = r#"
schema n_out:
  n: int

schema f_out:
  file: string

tool prep:
  command: `echo x >> prep.count; echo '{"n": 1}'`
  output: n_out

router fan:
  mode: fan_out_all

tool left:
  command: `echo l >> left.count; echo '{"file": "l"}'`
  output: f_out
  parallel_safe: true

tool right:
  command: `echo r >> right.count; if [ -e fail.once ]; then rm fail.once; exit 4; fi; echo '{"file": "r"}'`
  output: f_out
  parallel_safe: true

tool gather:
  command: `echo '{"n": 2}'`
  output: n_out
  await: wait_all

workflow forked:
  entry: prep
  prep -> fan
  fan -> left
  fan -> right
  left -> gather
  right -> gather
  gather -> done
"#;

#[tokio::test]
async fn a_failed_fan_out_resumes_at_its_router() {
    let h = Harness::new();
    std::fs::write(h.workspace.path().join("fail.once"), "").unwrap();
    let out = start(&h, FORK).await;
    assert_eq!(out.status, RunStatus::Failed, "{:?}", out.failure);
    assert_eq!(lines(&h, "right.count"), 1);
    let plan = resume::load(h.store.as_ref(), &out.run_id)
        .await
        .unwrap()
        .plan(compile(FORK), "sha-at-launch", false, &BTreeMap::new())
        .unwrap();
    assert_eq!(
        plan.point.as_ref().map(|p| p.at.to_string()),
        Some("fan".into())
    );
    let done = h
        .engine
        .resume(plan, SandboxFlags::default(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Finished, "{:?}", done.failure);
    // What ran before the fork did not run again; the branches did.
    assert_eq!(lines(&h, "prep.count"), 1);
    assert_eq!(lines(&h, "right.count"), 2);
    let joins = h.of_kind(&out.run_id, "join_ready").await;
    assert_eq!(joins.len(), 1, "{joins:?}");
}
