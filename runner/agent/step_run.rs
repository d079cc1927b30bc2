//! One step's run across the sessions it goes through: turns until the agent is done, fails or
//! stops, with an interrupt resuming the same session and a handoff or a compaction restarting
//! it in a fresh one ([`StepRun::restart`], the one place a session is replaced).

use std::sync::Arc;

use super::result::Meter;
use super::runtime::{RunOptions, Runtime, StepError, StepResult, INTERRUPT_NOTE};
use super::session_loop::{AgentRun, LoopEnd};
use super::spec::AgentSpec;
use crate::model::price::Cost;
use crate::model::Message;
use crate::record::handoff::MAX_GENERATIONS;
use crate::sandbox::AgentBox;
use crate::session::{SessionError, SessionMeta};

/// The state of a step between its turns.
pub(super) struct StepRun<'a> {
    /// The runtime the step runs on.
    pub rt: &'a Arc<Runtime>,
    /// The agent.
    pub spec: &'a AgentSpec,
    /// Its instance name.
    pub agent: String,
    /// Its first session's owner (a restart's session names the one it replaces as parent).
    pub meta: SessionMeta,
    /// Its sandbox.
    pub abox: AgentBox,
    /// What the step spends, at every depth.
    pub meter: Arc<Meter>,
    /// The step's options (its session hook).
    pub opts: &'a RunOptions,
    /// The session being run.
    pub run: AgentRun,
    /// Cost of the sessions retired by handoffs and compactions.
    pub retired_spend: Cost,
    /// Main-thread turns of those sessions.
    pub retired_turns: u32,
}

impl StepRun<'_> {
    /// Turns from `prompt` until the step ends; `result` gets the books.
    pub(super) async fn drive(&mut self, prompt: &str, result: &mut StepResult) {
        let mut compactions = 0;
        let mut next = prompt.to_string();
        loop {
            let end = self.run.turn(&next).await;
            self.account(result);
            next = match end {
                LoopEnd::Done => {
                    result.ok = true;
                    result.text = self.run.final_text();
                    return;
                }
                LoopEnd::Interrupted => self.after_interrupt(result).await,
                LoopEnd::HandoffDue { prompt_too_long } => {
                    match self.hand_off(prompt, prompt_too_long, result).await {
                        Some(next) => next,
                        None => return,
                    }
                }
                LoopEnd::CompactDue => {
                    compactions += 1;
                    match self.compact(compactions, result).await {
                        Some(next) => next,
                        None => return,
                    }
                }
                // The provider's retry policy already made every attempt it allows (issue 26
                // §4: one owner of the count); trying the turn again here would multiply them.
                LoopEnd::Failed(error) => return self.stop(result, StepError::Model(error)),
                LoopEnd::Stopped(reason) => return self.stop(result, reason),
            };
        }
    }

    /// The books after a turn: what every session of the step spent, the current one's
    /// context and errors.
    fn account(&mut self, result: &mut StepResult) {
        result.spend = self.retired_spend + self.run.spend();
        result.num_turns = self.retired_turns + self.run.turns;
        result.context = self.run.context_tokens;
        result.errors.extend(self.run.take_errors());
        result.session_id = Some(self.run.session_id().to_string());
    }

    /// Ends the step with `error` and the text so far.
    fn stop(&self, result: &mut StepResult, error: StepError) {
        result.text = self.run.final_text();
        result.error = Some(error);
    }

    /// Not a failed attempt: the same session goes on with the human's words (after they have
    /// been said, when the interrupt holds the run).
    async fn after_interrupt(&self, result: &mut StepResult) -> String {
        self.rt.held().await;
        let said = self.rt.take_interrupt().unwrap_or_default();
        result.resumed = true;
        if said.trim().is_empty() {
            format!("继续。{INTERRUPT_NOTE}")
        } else {
            format!("{said}\n\n{INTERRUPT_NOTE}")
        }
    }

    /// Near the window: a handoff document, then a fresh session told to continue from it.
    /// `None` when the step ends here.
    async fn hand_off(
        &mut self,
        prompt: &str,
        prompt_too_long: bool,
        result: &mut StepResult,
    ) -> Option<String> {
        let Some(window) = self.rt.config().handoff_window else {
            result.error = Some(StepError::HandoffOff);
            return None;
        };
        if result.retired.len() as u32 >= MAX_GENERATIONS {
            self.stop(result, StepError::Generations(MAX_GENERATIONS));
            return None;
        }
        if prompt_too_long && self.run.turns == 0 {
            // The model refused every request holding this session's history, so nothing can
            // read its spill pointers: the files it had not written yet are not needed (the
            // new session starts from the handoff document).
            self.rt.store().spill_discard(self.run.session_id());
        }
        let doc = self
            .rt
            .write_handoff(&mut self.run, &result.step, prompt, window, prompt_too_long)
            .await;
        result.errors.extend(self.run.take_errors());
        let session = self.rt.store().create(&self.successor_meta());
        self.restart(result, session, Vec::new())?;
        Some(doc.successor_prompt())
    }

    /// With handoffs off: the older conversation folded into a summary, in a fresh session
    /// holding it. `None` when the step ends here.
    async fn compact(&mut self, count: u32, result: &mut StepResult) -> Option<String> {
        use crate::agent::compact::{CONTINUE_NOTE, MAX_COMPACTIONS};
        let window = self.rt.config().compact_window.unwrap_or_default();
        if count > MAX_COMPACTIONS {
            let error = StepError::Compactions {
                count: MAX_COMPACTIONS,
                window,
            };
            self.stop(result, error);
            return None;
        }
        let history = match self.rt.compact(&mut self.run, window).await {
            Ok(h) => h,
            Err(e) => {
                self.stop(result, e);
                return None;
            }
        };
        let session = self.rt.seed_session(&self.successor_meta(), &history);
        self.restart(result, session, history)?;
        Some(CONTINUE_NOTE.to_string())
    }

    /// The owner of the session that replaces the current one.
    fn successor_meta(&self) -> SessionMeta {
        SessionMeta {
            parent: Some(self.run.session_id().to_string()),
            ..self.meta.clone()
        }
    }

    /// Retires the current session for `session` (made by the caller) holding `history`: its
    /// spend and turns stay in the books, the step's hook and manifest row learn the new one.
    /// `None` (the step ends) when the new session could not be made.
    fn restart(
        &mut self,
        result: &mut StepResult,
        session: Result<String, SessionError>,
        history: Vec<Message>,
    ) -> Option<()> {
        self.retired_spend += self.run.spend();
        self.retired_turns += self.run.turns;
        let session = match session {
            Ok(id) => id,
            Err(e) => {
                self.rt.not_saved("会话", &e);
                result.error = Some(StepError::from(e));
                return None;
            }
        };
        result.retired.push(self.run.session_id().to_string());
        self.run = AgentRun::new(
            self.rt.clone(),
            self.spec.clone(),
            self.agent.clone(),
            0,
            session,
            history,
            self.abox.clone(),
        )
        .with_meter(Some(self.meter.clone()));
        result.session_id = Some(self.run.session_id().to_string());
        if let Some(hook) = &self.opts.on_session {
            hook(self.run.session_id());
        }
        self.rt.track(result, false);
        Some(())
    }
}
