//! The question channel between agents and the human: [`HumanChannel`] (seed 003 "der
//! Frage-Kanal") implements the agent's [`Human`] for the workflows and the terminal.

pub mod human;

pub use crate::agent::human::{
    Absent, AskOutcome, Human, DECLINED_TEXT, EMPTY_QUESTION_TEXT, OVER_BUDGET_TEXT, TIMEOUT_TEXT,
};
pub use human::{HumanChannel, HumanConfig};
