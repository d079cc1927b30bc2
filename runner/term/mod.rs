//! The terminal: line editor, sanitised output port, screen rendering, input thread, progress.

pub mod line_editor;
pub mod render;
pub mod sanitize;
