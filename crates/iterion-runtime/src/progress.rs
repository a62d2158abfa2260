//! The run's resumable progress: one serialisable structure,
//! [`RunProgress`], changed only by applying [`ProgressStep`]s.
//!
//! The walker applies a step at every change (a node finished, an edge
//! taken, a fan-out forked or joined, a frame ended) and persists the same
//! step as a `run_checkpoint` event, so folding a run's checkpoint events
//! in order rebuilds exactly the state the engine held: finished nodes and
//! their outputs, where each frame (the main path, each parallel branch,
//! each foreach item) stands, its input, loop and round-robin counters.
//! A later `iterion resume` continues from that fold without re-running
//! finished nodes; this module does not resume anything itself.
//!
//! Persisted as deltas, not snapshots: each output is written once (in
//! the step that produced it), so a long run's checkpoints grow linearly.

use std::collections::BTreeMap;
use std::fmt;

use iterion_core::event::Payload;
use iterion_core::{EventKind, FailureCode, NodeId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::template::ARTIFACTS_KEY;

/// Version of the step format (`run_checkpoint.version`).
pub const PROGRESS_VERSION: u32 = 1;

/// A frame: the main path, or one parallel branch / foreach item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FrameId(String);

impl FrameId {
    /// The main path of the run.
    pub fn main() -> Self {
        Self("main".into())
    }

    /// A frame with this name.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the main path.
    pub fn is_main(&self) -> bool {
        self.0 == "main"
    }

    /// The branch id events carry (`None` on the main path).
    pub fn branch_id(&self) -> Option<&str> {
        (!self.is_main()).then_some(self.0.as_str())
    }
}

impl fmt::Display for FrameId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a frame stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FrameStatus {
    /// Executing (or about to execute) `at`.
    Running,
    /// Suspended at a fan-out until its children end.
    Waiting {
        /// The router (or foreach source) that forked.
        fork: NodeId,
        /// The child frames.
        children: Vec<FrameId>,
    },
    /// A branch that reached its join (its `input` is what it hands over).
    Reached {
        /// The join node.
        join: NodeId,
    },
    /// Reached `done`.
    Done,
    /// Failed.
    Failed {
        /// Failure code.
        code: FailureCode,
        /// Why.
        message: String,
    },
    /// Cancelled (the run, or a failing sibling under `wait_all`).
    Cancelled,
    /// Paused at the human node `at`, waiting for answers.
    Paused,
}

/// One frame's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameProgress {
    /// The frame it forked from (`None` for main).
    pub parent: Option<FrameId>,
    /// The next node to execute (`None` once ended).
    pub at: Option<NodeId>,
    /// That node's input.
    pub input: Map<String, Value>,
    /// Where a branch stops (its join), when it has one.
    pub stop_at: Option<NodeId>,
    /// Outputs produced in this frame (last execution of a node wins).
    pub outputs: BTreeMap<NodeId, Value>,
    /// Every node finished in this frame, in order.
    pub history: Vec<NodeId>,
    /// Loop counters (`as NAME(N)`), local to the frame.
    pub loops: BTreeMap<String, u32>,
    /// Round-robin positions by router, local to the frame.
    pub round_robin: BTreeMap<NodeId, u32>,
    /// Published artifacts (`publish:` name → latest output).
    #[serde(default)]
    pub artifacts: BTreeMap<String, Value>,
    /// Per loop, the source's output at the previous traversal of its
    /// back-edge (`{{loop.NAME.previous_output}}`).
    #[serde(default)]
    pub loop_previous: BTreeMap<String, Value>,
    /// Per loop, the source's output at the latest traversal (becomes
    /// `previous` at the next one).
    #[serde(default)]
    pub loop_current: BTreeMap<String, Value>,
    /// Status.
    pub status: FrameStatus,
    /// The node at `at` has finished and its output is recorded, but the
    /// frame has not moved on (a fork under way, a routing failure): a
    /// resume routes from that output instead of running the node again.
    #[serde(default)]
    pub at_finished: bool,
}

/// How the run was launched: what `iterion resume` needs to continue it
/// in another process (recorded once, as the first checkpoint).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunLaunch {
    /// The run's variables, resolved (declared defaults under `--var`).
    pub vars: BTreeMap<String, Value>,
    /// The host workspace, absolute.
    pub workspace: String,
    /// The workflow file, absolute.
    pub file: String,
    /// SHA-256 (hex) of the workflow source the run compiled; a resume
    /// of a changed source is refused unless forced.
    pub source_sha256: Option<String>,
    /// The caller's own launch settings (the CLI's sandbox flags), handed
    /// back to it on resume; the engine does not read them.
    #[serde(default)]
    pub settings: Map<String, Value>,
    /// `iterion run --timeout`, in milliseconds: a resume bounds the
    /// resumed run by it again (on a fresh clock, see `resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The run's `worktree: auto` worktree: a resume runs in it again and
    /// promotes its commits as the run was launched to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Box<crate::worktree::RunWorktree>>,
}

impl RunLaunch {
    /// The run's `--timeout`.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout_ms.map(std::time::Duration::from_millis)
    }
}

/// One change of the progress (the `step` of a `run_checkpoint` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ProgressStep {
    /// How the run was launched (first step of a run).
    Launched {
        /// The launch.
        launch: RunLaunch,
    },
    /// A resume reopened `frame` at `at` (the frame's position, or the
    /// fork it restarts), dropping any fork it was waiting on.
    Reopened {
        /// The frame.
        frame: FrameId,
        /// Where it continues.
        at: NodeId,
    },
    /// A frame begins at `at`.
    FrameStarted {
        /// The new frame.
        frame: FrameId,
        /// Its parent (`None` only for main).
        parent: Option<FrameId>,
        /// First node.
        at: NodeId,
        /// Its input.
        input: Map<String, Value>,
        /// Where it stops.
        stop_at: Option<NodeId>,
    },
    /// A node of the frame finished with `output`.
    NodeFinished {
        /// The frame.
        frame: FrameId,
        /// The node.
        node: NodeId,
        /// Its output.
        output: Value,
        /// The artifact name it publishes the output as (`publish:`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        publish: Option<String>,
    },
    /// The frame moved on along an edge (`to: None` = `done`).
    Advanced {
        /// The frame.
        frame: FrameId,
        /// Next node.
        to: Option<NodeId>,
        /// Its input.
        input: Map<String, Value>,
        /// Loop counters after the edge.
        loops: BTreeMap<String, u32>,
        /// Round-robin positions after the edge.
        round_robin: BTreeMap<NodeId, u32>,
        /// The loop whose back-edge this was, with the source's output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        looped: Option<(String, Value)>,
    },
    /// The frame suspends at a fork until `children` end.
    Forked {
        /// The frame.
        frame: FrameId,
        /// The router or foreach source.
        fork: NodeId,
        /// Child frames (each also gets a `FrameStarted`).
        children: Vec<FrameId>,
    },
    /// The children merged back: their outputs join the frame's, which
    /// resumes at the join node with `input`.
    Joined {
        /// The frame.
        frame: FrameId,
        /// The join node (`None`: every branch ended at `done`).
        at: Option<NodeId>,
        /// The join node's input.
        input: Map<String, Value>,
        /// Children whose outputs merge, in order.
        merged: Vec<FrameId>,
    },
    /// The frame ended.
    Ended {
        /// The frame.
        frame: FrameId,
        /// How.
        status: FrameStatus,
    },
}

/// A step that does not fit the progress it is applied to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgressError {
    /// The step names a frame the progress does not hold.
    #[error("progress step names unknown frame {frame}")]
    UnknownFrame {
        /// The frame.
        frame: FrameId,
    },
    /// A frame started twice.
    #[error("progress step starts frame {frame}, which already exists")]
    DuplicateFrame {
        /// The frame.
        frame: FrameId,
    },
    /// A checkpoint written by a format this engine does not read.
    #[error(
        "run_checkpoint event {seq} has format version {version}; this engine reads {PROGRESS_VERSION}"
    )]
    UnsupportedVersion {
        /// The event's seq.
        seq: u64,
        /// Its version.
        version: u64,
    },
    /// A checkpoint whose step does not parse.
    #[error("run_checkpoint event {seq} does not hold a progress step: {message}")]
    BadStep {
        /// The event's seq.
        seq: u64,
        /// Why.
        message: String,
    },
}

/// Where a resumed run continues (on the main path).
#[derive(Debug, Clone, PartialEq)]
pub struct ResumePoint {
    /// The node.
    pub at: NodeId,
    /// Its output, when it finished before the run stopped (routed from,
    /// never run again).
    pub output: Option<Value>,
    /// The run paused at this (human) node.
    pub paused: bool,
}

/// A progress no resume can continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeStateError {
    /// The main path reached `done`.
    #[error("the run's progress already reached done")]
    Completed,
}

/// Everything a run has done so far.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunProgress {
    /// Format version ([`PROGRESS_VERSION`]).
    pub version: u32,
    /// Frames by id.
    pub frames: BTreeMap<FrameId, FrameProgress>,
    /// How the run was launched (`None` for a run recorded before it was).
    #[serde(default)]
    pub launch: Option<RunLaunch>,
}

impl RunProgress {
    /// An empty progress (no frame yet).
    pub fn new() -> Self {
        Self {
            version: PROGRESS_VERSION,
            frames: BTreeMap::new(),
            launch: None,
        }
    }

    /// Fold `steps` into a fresh progress.
    pub fn replay<'s>(
        steps: impl IntoIterator<Item = &'s ProgressStep>,
    ) -> Result<Self, ProgressError> {
        let mut p = Self::new();
        for s in steps {
            p.apply(s)?;
        }
        Ok(p)
    }

    /// Rebuild a run's progress from its event stream: its
    /// `run_checkpoint` events, in order (what `iterion resume` starts
    /// from), read through the event's own decoder. A checkpoint of another
    /// format version is refused, never half-read, and so is one that does
    /// not have a checkpoint's shape.
    pub fn from_events<'e>(
        events: impl IntoIterator<Item = &'e iterion_core::EventRecord>,
    ) -> Result<Self, ProgressError> {
        let mut p = Self::new();
        for e in events.into_iter().filter(|e| e.kind == "run_checkpoint") {
            let bad = |message| ProgressError::BadStep {
                seq: e.seq,
                message,
            };
            let payload = e.payload();
            let Some(EventKind::RunCheckpoint { version, step }) = payload.known() else {
                let why = match &payload {
                    Payload::Malformed { error, .. } => error.clone(),
                    other => format!("read back as {}", other.name()),
                };
                return Err(bad(format!("not a checkpoint's shape: {why}")));
            };
            if *version != PROGRESS_VERSION {
                return Err(ProgressError::UnsupportedVersion {
                    seq: e.seq,
                    version: u64::from(*version),
                });
            }
            let step = ProgressStep::deserialize(step).map_err(|err| bad(err.to_string()))?;
            p.apply(&step)?;
        }
        Ok(p)
    }

    /// One frame.
    pub fn frame(&self, id: &FrameId) -> Option<&FrameProgress> {
        self.frames.get(id)
    }

    /// How many times `node` ran in `frame` so far (0 for an unknown
    /// frame): what tells one asking of a human node from the next.
    pub fn visits(&self, frame: &FrameId, node: &NodeId) -> usize {
        self.frame(frame)
            .map_or(0, |f| f.history.iter().filter(|n| *n == node).count())
    }

    fn frame_mut(&mut self, id: &FrameId) -> Result<&mut FrameProgress, ProgressError> {
        self.frames
            .get_mut(id)
            .ok_or_else(|| ProgressError::UnknownFrame { frame: id.clone() })
    }

    /// Apply one step.
    pub fn apply(&mut self, step: &ProgressStep) -> Result<(), ProgressError> {
        match step {
            ProgressStep::Launched { launch } => self.launch = Some(launch.clone()),
            ProgressStep::Reopened { frame, at } => {
                let f = self.frame_mut(frame)?;
                f.at_finished = f.at.as_ref() == Some(at) && f.at_finished;
                f.at = Some(at.clone());
                f.status = FrameStatus::Running;
            }
            ProgressStep::FrameStarted {
                frame,
                parent,
                at,
                input,
                stop_at,
            } => {
                if self.frames.contains_key(frame) {
                    return Err(ProgressError::DuplicateFrame {
                        frame: frame.clone(),
                    });
                }
                if let Some(p) = parent
                    && !self.frames.contains_key(p)
                {
                    return Err(ProgressError::UnknownFrame { frame: p.clone() });
                }
                self.frames.insert(
                    frame.clone(),
                    FrameProgress {
                        parent: parent.clone(),
                        at: Some(at.clone()),
                        input: input.clone(),
                        stop_at: stop_at.clone(),
                        outputs: BTreeMap::new(),
                        history: Vec::new(),
                        loops: BTreeMap::new(),
                        round_robin: BTreeMap::new(),
                        artifacts: BTreeMap::new(),
                        loop_previous: BTreeMap::new(),
                        loop_current: BTreeMap::new(),
                        status: FrameStatus::Running,
                        at_finished: false,
                    },
                );
            }
            ProgressStep::NodeFinished {
                frame,
                node,
                output,
                publish,
            } => {
                let f = self.frame_mut(frame)?;
                f.outputs.insert(node.clone(), output.clone());
                f.history.push(node.clone());
                f.at_finished = f.at.as_ref() == Some(node);
                if let Some(name) = publish {
                    f.artifacts.insert(name.clone(), output.clone());
                }
            }
            ProgressStep::Advanced {
                frame,
                to,
                input,
                loops,
                round_robin,
                looped,
            } => {
                let f = self.frame_mut(frame)?;
                f.at = to.clone();
                f.at_finished = false;
                f.input = input.clone();
                // A loop counter that went back to zero is a fresh instance
                // of the loop: it has no previous output.
                f.loop_previous.retain(|name, _| loops.contains_key(name));
                f.loop_current.retain(|name, _| loops.contains_key(name));
                f.loops = loops.clone();
                f.round_robin = round_robin.clone();
                if let Some((name, output)) = looped {
                    if let Some(current) = f.loop_current.remove(name) {
                        f.loop_previous.insert(name.clone(), current);
                    }
                    f.loop_current.insert(name.clone(), output.clone());
                }
                if to.is_none() {
                    f.status = FrameStatus::Done;
                }
            }
            ProgressStep::Forked {
                frame,
                fork,
                children,
            } => {
                let f = self.frame_mut(frame)?;
                f.status = FrameStatus::Waiting {
                    fork: fork.clone(),
                    children: children.clone(),
                };
            }
            ProgressStep::Joined {
                frame,
                at,
                input,
                merged,
            } => {
                let mut outputs = Vec::new();
                let mut artifacts = Vec::new();
                for child in merged {
                    let c = self
                        .frames
                        .get(child)
                        .ok_or_else(|| ProgressError::UnknownFrame {
                            frame: child.clone(),
                        })?;
                    outputs.extend(c.outputs.iter().map(|(k, v)| (k.clone(), v.clone())));
                    artifacts.extend(c.artifacts.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                let f = self.frame_mut(frame)?;
                f.outputs.extend(outputs);
                f.artifacts.extend(artifacts);
                f.at = at.clone();
                f.at_finished = false;
                f.input = input.clone();
                f.status = match at {
                    Some(_) => FrameStatus::Running,
                    None => FrameStatus::Done,
                };
            }
            // `at` stays: where a failed, cancelled or paused frame stopped
            // is where a resume continues.
            ProgressStep::Ended { frame, status } => {
                self.frame_mut(frame)?.status = status.clone();
            }
        }
        Ok(())
    }

    /// Outputs a node of `frame` sees: its ancestors' (as of the fork)
    /// overlaid by its own, with the published artifacts under
    /// [`ARTIFACTS_KEY`] (what `{{outputs.…}}`/`{{artifacts.…}}` read).
    pub fn visible_outputs(&self, frame: &FrameId) -> BTreeMap<NodeId, Value> {
        let mut chain = Vec::new();
        let mut cur = self.frames.get(frame);
        while let Some(f) = cur {
            chain.push(f);
            cur = f.parent.as_ref().and_then(|p| self.frames.get(p));
        }
        let mut out = BTreeMap::new();
        let mut artifacts = Map::new();
        for f in chain.into_iter().rev() {
            out.extend(f.outputs.iter().map(|(k, v)| (k.clone(), v.clone())));
            artifacts.extend(f.artifacts.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if !artifacts.is_empty() {
            out.insert(NodeId::new(ARTIFACTS_KEY), Value::Object(artifacts));
        }
        out
    }

    /// Where a resume continues: the main path's node, or the fork it was
    /// waiting on (upstream restarts a fan-out at its router: the branches
    /// run again; what finished before the fork does not).
    pub fn resume_point(&self) -> Result<Option<ResumePoint>, ResumeStateError> {
        let Some(main) = self.frames.get(&FrameId::main()) else {
            // Nothing ran: the run starts from its entry.
            return Ok(None);
        };
        let (at, fork) = match &main.status {
            FrameStatus::Done => return Err(ResumeStateError::Completed),
            FrameStatus::Waiting { fork, .. } => (Some(fork.clone()), true),
            _ => (main.at.clone(), false),
        };
        let Some(at) = at else {
            return Err(ResumeStateError::Completed);
        };
        let output = (main.at_finished || fork)
            .then(|| main.outputs.get(&at).cloned())
            .flatten();
        Ok(Some(ResumePoint {
            at,
            output,
            paused: main.status == FrameStatus::Paused,
        }))
    }

    /// Frame ids not used yet, one per base name (`base`, then `base_2`,
    /// `base_3`… when taken).
    pub fn fresh_frame_ids(&self, bases: &[String]) -> Vec<FrameId> {
        let mut out: Vec<FrameId> = Vec::with_capacity(bases.len());
        for base in bases {
            let mut id = FrameId::new(base.clone());
            let mut n = 2u64;
            while self.frames.contains_key(&id) || out.contains(&id) {
                id = FrameId::new(format!("{base}_{n}"));
                n += 1;
            }
            out.push(id);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn id(s: &str) -> NodeId {
        NodeId::new(s)
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn fan_out_steps() -> Vec<ProgressStep> {
        let main = FrameId::main();
        let a = FrameId::new("branch_r_a");
        let b = FrameId::new("branch_r_b");
        vec![
            ProgressStep::FrameStarted {
                frame: main.clone(),
                parent: None,
                at: id("r"),
                input: Map::new(),
                stop_at: None,
            },
            ProgressStep::NodeFinished {
                frame: main.clone(),
                node: id("r"),
                output: json!({}),
                publish: None,
            },
            ProgressStep::Forked {
                frame: main.clone(),
                fork: id("r"),
                children: vec![a.clone(), b.clone()],
            },
            ProgressStep::FrameStarted {
                frame: a.clone(),
                parent: Some(main.clone()),
                at: id("a"),
                input: Map::new(),
                stop_at: Some(id("j")),
            },
            ProgressStep::FrameStarted {
                frame: b.clone(),
                parent: Some(main.clone()),
                at: id("b"),
                input: Map::new(),
                stop_at: Some(id("j")),
            },
            ProgressStep::NodeFinished {
                frame: a.clone(),
                node: id("a"),
                output: json!({"x": 1}),
                publish: Some("doc".into()),
            },
            ProgressStep::Advanced {
                frame: a.clone(),
                to: Some(id("j")),
                input: obj(json!({"from_a": 1})),
                loops: BTreeMap::new(),
                round_robin: BTreeMap::new(),
                looped: None,
            },
            ProgressStep::Ended {
                frame: a.clone(),
                status: FrameStatus::Reached { join: id("j") },
            },
            ProgressStep::Ended {
                frame: b.clone(),
                status: FrameStatus::Failed {
                    code: FailureCode::NodeFailed,
                    message: "boom".into(),
                },
            },
            ProgressStep::Joined {
                frame: main.clone(),
                at: Some(id("j")),
                input: obj(json!({"from_a": 1})),
                merged: vec![a],
            },
        ]
    }

    #[test]
    fn a_fan_out_folds_into_the_parent() {
        let p = RunProgress::replay(&fan_out_steps()).unwrap();
        let main = p.frame(&FrameId::main()).unwrap();
        assert_eq!(main.status, FrameStatus::Running);
        assert_eq!(main.at, Some(id("j")));
        assert_eq!(main.outputs.get(&id("a")), Some(&json!({"x": 1})));
        let b = p.frame(&FrameId::new("branch_r_b")).unwrap();
        assert!(matches!(b.status, FrameStatus::Failed { .. }));
        // Where it failed stays, for a resume.
        assert_eq!(b.at, Some(id("b")));
        // A branch sees its parent's outputs under its own; what it
        // published is merged into the parent at the join.
        let seen = p.visible_outputs(&FrameId::new("branch_r_a"));
        assert_eq!(seen.len(), 3);
        assert_eq!(main.artifacts.get("doc"), Some(&json!({"x": 1})));
        assert_eq!(
            p.visible_outputs(&FrameId::main())[&NodeId::new(ARTIFACTS_KEY)],
            json!({"doc": {"x": 1}})
        );
    }

    #[test]
    fn steps_round_trip_as_json() {
        for s in fan_out_steps() {
            let text = serde_json::to_string(&s).unwrap();
            let back: ProgressStep = serde_json::from_str(&text).unwrap();
            assert_eq!(back, s);
        }
        let p = RunProgress::replay(&fan_out_steps()).unwrap();
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<RunProgress>(&text).unwrap(), p);
    }

    #[test]
    fn bad_steps_are_typed_errors() {
        let mut p = RunProgress::new();
        assert!(matches!(
            p.apply(&ProgressStep::NodeFinished {
                frame: FrameId::main(),
                node: id("a"),
                output: json!({}),
                publish: None,
            }),
            Err(ProgressError::UnknownFrame { .. })
        ));
        let start = fan_out_steps().remove(0);
        p.apply(&start).unwrap();
        assert!(matches!(
            p.apply(&start),
            Err(ProgressError::DuplicateFrame { .. })
        ));
        assert_eq!(
            p.fresh_frame_ids(&["main".into(), "x".into(), "x".into()]),
            [
                FrameId::new("main_2"),
                FrameId::new("x"),
                FrameId::new("x_2")
            ]
        );
    }

    #[test]
    fn events_fold_and_foreign_versions_are_refused() {
        let record = |seq: u64, version: u32, step: &ProgressStep| iterion_core::EventRecord {
            seq,
            timestamp: time::OffsetDateTime::UNIX_EPOCH,
            kind: "run_checkpoint".into(),
            run_id: iterion_core::RunId::generate(),
            node_id: None,
            data: json!({"version": version, "step": step}),
        };
        let steps = fan_out_steps();
        let events: Vec<_> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| record(i as u64 + 1, PROGRESS_VERSION, s))
            .collect();
        assert_eq!(
            RunProgress::from_events(&events).unwrap(),
            RunProgress::replay(&steps).unwrap()
        );
        let newer = [record(1, PROGRESS_VERSION + 1, &steps[0])];
        assert!(matches!(
            RunProgress::from_events(&newer),
            Err(ProgressError::UnsupportedVersion { seq: 1, .. })
        ));
        let mut garbled = record(1, PROGRESS_VERSION, &steps[0]);
        garbled.data["step"] = json!({"op": "teleported"});
        assert!(matches!(
            RunProgress::from_events(&[garbled]),
            Err(ProgressError::BadStep { .. })
        ));
        // Not a checkpoint's shape at all (no version, a version that is
        // not a number): refused with what the decoder said, never read.
        for data in [
            json!({"step": steps[0]}),
            json!({"version": "1", "step": steps[0]}),
        ] {
            let mut odd = record(1, PROGRESS_VERSION, &steps[0]);
            odd.data = data;
            match RunProgress::from_events(&[odd]) {
                Err(ProgressError::BadStep { seq: 1, message }) => {
                    assert!(
                        message.starts_with("not a checkpoint's shape: "),
                        "{message}"
                    )
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn loop_outputs_rotate_one_traversal_behind() {
        let main = FrameId::main();
        let mut p = RunProgress::new();
        p.apply(&fan_out_steps()[0]).unwrap();
        let back = |n: u32, out: Value| ProgressStep::Advanced {
            frame: main.clone(),
            to: Some(id("r")),
            input: Map::new(),
            loops: BTreeMap::from([("again".to_owned(), n)]),
            round_robin: BTreeMap::new(),
            looped: Some(("again".into(), out)),
        };
        p.apply(&back(1, json!({"n": 1}))).unwrap();
        assert!(p.frame(&main).unwrap().loop_previous.is_empty());
        p.apply(&back(2, json!({"n": 2}))).unwrap();
        assert_eq!(
            p.frame(&main).unwrap().loop_previous["again"],
            json!({"n": 1})
        );
        // Re-entered afresh (counter reset): no previous output.
        p.apply(&ProgressStep::Advanced {
            frame: main.clone(),
            to: Some(id("r")),
            input: Map::new(),
            loops: BTreeMap::new(),
            round_robin: BTreeMap::new(),
            looped: None,
        })
        .unwrap();
        assert!(p.frame(&main).unwrap().loop_previous.is_empty());
    }

    proptest! {
        /// Any prefix of a valid step sequence folds without error, and
        /// folding is deterministic.
        #[test]
        fn prefixes_fold(n in 0usize..11) {
            let steps = fan_out_steps();
            let n = n.min(steps.len());
            let a = RunProgress::replay(&steps[..n]);
            let b = RunProgress::replay(&steps[..n]);
            prop_assert!(a.is_ok());
            prop_assert_eq!(a.ok(), b.ok());
        }
    }
}
