//! `Skill`: reads a plugin's skill on demand (Claude Code's Skill tool). Every agent that can
//! read sees the skills' names and descriptions in its system prompt; the full `SKILL.md`, or
//! a file beside it, is read here by flowerbox through the one configuration reader (beneath
//! the workspace: no symlink out of it), so a skill outside the agent's mounts is readable too
//! and nothing of it runs.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::fsroot::config::{self as config_file, CONFIG_CAP};

/// The tool's name.
pub const NAME: &str = "Skill";

/// Reads a skill.
pub(super) struct SkillTool;

#[derive(Deserialize)]
struct Input {
    skill: String,
    #[serde(default)]
    file: Option<String>,
}

#[async_trait]
impl Tool for SkillTool {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> String {
        "读一个技能的完整说明(SKILL.md)。系统提示里列出了能用的技能和它们的用途;任务和某个技能的用途对得上时,先用它读完整说明再动手。\
         file 可选:读技能目录里 SKILL.md 旁边的文件(相对路径)。"
            .into()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "skill": {"type": "string", "description": "技能名(或 插件名:技能名)"},
                "file": {"type": "string", "description": "技能目录里的相对路径,默认 SKILL.md"}
            },
            "required": ["skill"],
            "additionalProperties": false
        })
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let Input { skill, file } = parse_input(input)?;
        let Some(s) = ctx.plugins.skill(&skill) else {
            let known: Vec<&str> = ctx.plugins.skills.iter().map(|s| s.name.as_str()).collect();
            return Err(ToolError::Failed(format!(
                "没有叫 {skill} 的技能;有的是:{}",
                if known.is_empty() {
                    "(无)".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        let rel = file.unwrap_or_else(|| "SKILL.md".into());
        let rel_path = std::path::Path::new(&rel);
        if rel_path.is_absolute()
            || rel_path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(ToolError::Path(format!(
                "file 要是技能目录里的相对路径,不能是 {rel}"
            )));
        }
        let path = s.dir.join(rel_path);
        match config_file::read(&path, &s.place, CONFIG_CAP) {
            Ok(Some(f)) => {
                let mut text = f.text();
                if rel == "SKILL.md" {
                    let beside: Vec<String> = config_file::list(&s.dir, &s.place)
                        .ok()
                        .flatten()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(n, _)| n != "SKILL.md")
                        .map(|(n, d)| if d { format!("{n}/") } else { n })
                        .collect();
                    if !beside.is_empty() {
                        text.push_str(&format!(
                            "\n\n[技能目录 {} 里还有:{};要读就用 Skill 的 file 参数]",
                            s.dir.display(),
                            beside.join(", ")
                        ));
                    }
                }
                Ok(text)
            }
            Ok(None) => Err(ToolError::Failed(format!("{} 不存在", path.display()))),
            Err(e) => Err(ToolError::Failed(format!("{} 读不了:{e}", path.display()))),
        }
    }
}
