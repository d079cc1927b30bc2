//! [`ToolName`]: the tools flowerbox offers a model, by the names the model calls them (Claude
//! Code's names, which models know). One source for every layer that decides by tool: the
//! agent's guards and registry, trim on resume, the terminal, the command line's `-t` list.
//! Tools added at run time (a project's MCP servers) have names outside this list.

use std::fmt;

/// One of flowerbox's own tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolName {
    /// Reads a file.
    Read,
    /// Writes a file.
    Write,
    /// Edits a file in place.
    Edit,
    /// Finds files by pattern.
    Glob,
    /// Searches file contents.
    Grep,
    /// Runs a shell command in the agent's sandbox.
    Bash,
    /// Keeps the agent's todo list.
    TodoWrite,
    /// Dispatches a worker.
    Agent,
    /// Fetches a URL (host side, under the egress policy).
    WebFetch,
    /// Asks the human (`mcp__human__ask`).
    Ask,
    /// Takes what the human sent (`mcp__human__inbox`).
    Inbox,
    /// Reads a background command's new output and status.
    TaskOutput,
    /// Stops a background command.
    TaskStop,
}

impl ToolName {
    /// Every tool, in the registry's listing order.
    pub const ALL: [ToolName; 13] = [
        ToolName::Read,
        ToolName::Write,
        ToolName::Edit,
        ToolName::Glob,
        ToolName::Grep,
        ToolName::Bash,
        ToolName::TodoWrite,
        ToolName::Agent,
        ToolName::WebFetch,
        ToolName::Ask,
        ToolName::Inbox,
        ToolName::TaskOutput,
        ToolName::TaskStop,
    ];

    /// The name the model calls.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolName::Read => "Read",
            ToolName::Write => "Write",
            ToolName::Edit => "Edit",
            ToolName::Glob => "Glob",
            ToolName::Grep => "Grep",
            ToolName::Bash => "Bash",
            ToolName::TodoWrite => "TodoWrite",
            ToolName::Agent => "Agent",
            ToolName::WebFetch => "WebFetch",
            ToolName::Ask => "mcp__human__ask",
            ToolName::Inbox => "mcp__human__inbox",
            ToolName::TaskOutput => "TaskOutput",
            ToolName::TaskStop => "TaskStop",
        }
    }

    /// The tool called `name`, if it is one of these.
    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Whether `name` is this tool.
    pub fn is(self, name: &str) -> bool {
        self.as_str() == name
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for t in ToolName::ALL {
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
            assert!(t.is(&t.to_string()));
        }
        let mut names: Vec<&str> = ToolName::ALL.iter().map(|t| t.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ToolName::ALL.len());
        assert_eq!(ToolName::parse("WebSearch"), None);
    }
}
