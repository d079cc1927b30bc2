//! Handoff inside a step (seed 001 "换代"): when the main thread's context is full, the current
//! session writes its handoff document (budget-exempt), or the runner assembles a degraded one;
//! it lands in `notes/交接-<step>.md` and the next session starts from it.

use std::sync::Arc;

use super::event::EventKind;
use super::runtime::Runtime;
use super::session_loop::AgentRun;
use crate::record::handoff::Handoff;

impl Runtime {
    /// Asks the current session for its handoff (budget-exempt), falls back to the degraded
    /// document, writes it to `notes/交接-<step>.md`, and tells the UI.
    pub(crate) async fn write_handoff(
        self: &Arc<Self>,
        run: &mut AgentRun,
        step: &str,
        original_prompt: &str,
        window: u64,
        prompt_too_long: bool,
    ) -> Handoff {
        let used = run.context_tokens;
        let mut why = String::new();
        let mut doc = None;
        if prompt_too_long {
            why = "上下文已经超出模型窗口,没法再让它写".into();
        } else {
            let answer = run
                .handoff_turn(&Handoff::request_prompt(used, window))
                .await;
            match answer {
                Ok(text) => {
                    let h = Handoff::parse(step, &text);
                    if h.is_complete() {
                        doc = Some(h);
                    } else {
                        why = format!("它写的交接书缺:{}", h.missing().join("、"));
                    }
                }
                Err(e) => why = e.to_string(),
            }
        }
        let degraded = doc.is_none();
        let doc = doc.unwrap_or_else(|| Handoff::degraded(step, original_prompt, &why));
        let path = match &self.workbench {
            Some(wb) => match doc.write(&wb.notes()) {
                Ok(p) => p.display().to_string(),
                Err(e) => {
                    self.not_saved("交接书", &e);
                    String::new()
                }
            },
            None => String::new(),
        };
        let sections = [
            ("现在在做", &doc.doing),
            ("已定的事", &doc.decided),
            ("走不通的", &doc.deadends),
            ("下一步", &doc.next),
        ]
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                v.lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
        self.emit(
            run.agent(),
            run.role(),
            0,
            EventKind::Handoff {
                context_tokens: used,
                window,
                path,
                degraded,
                sections,
            },
        );
        doc
    }
}
