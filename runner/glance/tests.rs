//! Unit tests of [`super::is_ephemeral`]: the brief's cases, read-only commands, compounds,
//! mutations, dangerous options and adversarial shell constructs.

use super::lex::{lex, RedirKind, Tok};
use super::*;

fn yes(cmd: &str) {
    assert!(
        check(cmd).is_ok(),
        "should be ephemeral: {cmd:?} ({:?})",
        check(cmd)
    );
}

fn no(cmd: &str) {
    assert!(!is_ephemeral(cmd), "should be refused: {cmd:?}");
}

#[test]
fn the_briefs_examples() {
    yes("git status && git log --oneline | head");
    no("rm -rf x");
    no("git status && rm x");
    no("cat a > b");
    no("ls $(pwd)");
    no("sleep 10 &");
    no("find . -delete");
    no("echo x | xargs rm");
    no("sed -i s/a/b/ f");
}

#[test]
fn single_read_only_commands_pass() {
    for cmd in [
        "git status",
        "git status -s",
        "git diff",
        "git diff --stat HEAD~3",
        "git log --oneline -10",
        "git show HEAD:README.md",
        "git show stash@{0}",
        "git branch",
        "git branch -a -v",
        "git branch --show-current",
        "git branch --list 'feat/*'",
        "git branch --contains HEAD",
        "git -C /work/repo status",
        "git --no-pager log -3",
        "git rev-parse --abbrev-ref HEAD",
        "git stash list",
        "git worktree list",
        "git remote -v",
        "git config --get user.name",
        "git ls-files",
        "git tag",
        "git tag --list 'v*'",
        "ls",
        "ls -la src/",
        "ls *.rs",
        "pwd",
        "ps aux",
        "cat Cargo.toml",
        "head -n 20 src/main.rs",
        "tail -n 50 log.txt",
        "wc -l *.rs",
        "grep -rn 'fn main' src",
        "rg -n TODO",
        "rg -n TODO -- *.rs",
        "find . -name '*.rs' -type f",
        "file ./app",
        "lsof -i :8080",
        "stat Cargo.toml",
        "du -sh target",
        "df -h",
        "echo hello",
        "which cargo",
        "tree -L 2",
        "env",
        "printenv PATH",
        "sort -k2 -n data.txt",
        "uniq -c data.txt",
        "sed -n '1,20p' file.txt",
        "sed -n 5p f",
        "sed 's/a/b/g' f",
        "sed -E 's|x+|y|2' f",
        "sed -n '/start/,/end/p' f",
        "sed '10q' f",
        "jq .name package.json",
        "date",
        "hostname",
        "cd src && ls",
        "ls # just looking",
    ] {
        yes(cmd);
    }
}

#[test]
fn compound_commands_pass_when_every_segment_does() {
    yes(r#"git status -s && echo "--- LOG ---" && git log --oneline -10"#);
    yes("ps aux | grep python | head");
    yes("ls 2>&1 | head");
    yes("git status; git diff --stat");
    yes("ls nope 2>/dev/null || echo missing");
    yes("ls > /dev/null");
    yes("ls &>/dev/null");
    yes("ls 1>&2");
    yes("git status\ngit log -1");
    yes("git status &&\n  git log -1");
    yes("ls;");
    yes("cat < Cargo.toml");
    yes("git branch -a && git branch --show-current && git log --oneline -5");
}

#[test]
fn mutating_commands_are_refused() {
    for cmd in [
        "rm x",
        "mv a b",
        "cp a b",
        "touch f",
        "mkdir d",
        "chmod +x f",
        "git commit -m x",
        "git checkout main",
        "git reset --hard",
        "git push",
        "git pull",
        "git fetch",
        "git merge x",
        "git rebase main",
        "git add .",
        "git stash",
        "git stash pop",
        "git branch -D feature",
        "git branch -d feature",
        "git branch -m old new",
        "git branch -M new",
        "git branch --delete x",
        "git branch newbranch",
        "git tag v1",
        "git tag -d v1",
        "git worktree add ../x",
        "git remote add o url",
        "git config user.name x",
        "git config --unset user.name",
        "git reflog expire --all",
        "git clean -fd",
        "git -c core.pager=rm log",
        "git diff --output=patch.txt",
        "git log --output=x",
        "git grep -Oless foo",
        "cargo build",
        "pytest",
        "pip install x",
        "npm test",
        "make",
        "python3 -c 'print(1)'",
        "bash -c ls",
        "sh script.sh",
        "curl http://x",
        "kill 1",
        "sleep 10",
        "tee out",
        "awk '{print}' f",
        "dd if=/dev/zero of=x",
        "truncate -s0 f",
        "ln -s a b",
    ] {
        no(cmd);
    }
}

#[test]
fn dangerous_options_of_allowed_commands_are_refused() {
    for cmd in [
        "find . -delete",
        "find . -name x -exec rm {} ;",
        "find . -execdir rm {} +",
        "find . -ok rm {} ;",
        "find . -fprint out",
        "find . \"-delete\"",
        "find . -dele\\te",
        "find . -name *.rs",
        "sed -i s/a/b/ f",
        "sed -ni 1p f",
        "sed --in-place s/a/b/ f",
        "sed -i.bak s/a/b/ f",
        "sed 's/a/b/w out' f",
        "sed 's/a/b/e' f",
        "sed 'w out' f",
        "sed -n '1p;w out' f",
        "sed -f script.sed f",
        "sed 'e ls' f",
        "sed '1r /etc/passwd' f",
        "sort -o out in",
        "sort -rno out in",
        "sort --output=out in",
        "sort --compress-program=sh in",
        "uniq in out",
        "tail -f log",
        "tail -F log",
        "tail -fn 10 log",
        "tail --follow=name log",
        "lsof -r 1 -i :80",
        "lsof +r1 -p 1",
        "tree -o out.txt",
        "date -s '2020-01-01'",
        "date --set=now",
        "file -C -m magic",
        "rg --pre=rm foo",
        "rg --pre rm foo",
        "rg foo *",
        "hostname evil",
        "env rm -rf x",
        "env FOO=1 ls",
    ] {
        no(cmd);
    }
}

#[test]
fn shell_constructs_that_execute_or_write_are_refused() {
    for cmd in [
        "ls $(pwd)",
        "ls \"$(pwd)\"",
        "ls `pwd`",
        "echo \"`id`\"",
        "cat <(ls)",
        "diff <(ls a) <(ls b)",
        "ls >(cat)",
        "echo $((1+2))",
        "echo $[1+2]",
        "echo ${x:=y}",
        "echo ${x//a/b}",
        "echo $'\\x41'",
        "cat a > b",
        "cat a >> b",
        "ls >| out",
        "ls &> out",
        "ls &>> out",
        "ls 2> err.txt",
        "ls >&out",
        "ls > $HOME/x",
        "cat <<EOF\nx\nEOF",
        "cat <<< hi",
        "cat <> f",
        "sleep 10 &",
        "ls & rm x",
        "ls |& cat",
        "(ls)",
        "( rm x )",
        "{ ls; }",
        "ls && (rm x)",
        "FOO=bar ls",
        "PATH=/tmp ls",
        "$CMD",
        "${CMD} x",
        "/bin/rm x",
        "./script.sh",
        "ls &&",
        "ls |",
        "&& ls",
        "; ls",
        "ls ;; ls",
        "echo {a,b}",
        "find . -{delete,name}",
        "ls 'unterminated",
        "ls \"unterminated",
        "ls \\",
        "",
        "   ",
        "\n",
    ] {
        no(cmd);
    }
}

#[test]
fn quoting_is_respected() {
    // Inside single quotes nothing is special.
    yes("grep '$(rm -rf /)' src/main.rs");
    yes("grep '`id`' f");
    yes("echo 'a > b'");
    yes("echo 'x && rm y'");
    yes("grep -n 'a|b' f");
    yes("echo \"semi; colon\"");
    yes("grep \"foo$\" f");
    yes("echo '{a,b}'");
    // Double quotes do not stop substitution.
    no("echo \"$(rm x)\"");
    // An escaped operator is a literal character.
    yes("echo a \\> b");
    yes("echo a\\;b");
    // Quotes do not hide a forbidden option or command.
    no("'rm' x");
    no("r\"m\" x");
    no("find . '-exec' rm {} \\;");
    no("git 'commit' -m x");
    no("git branch '-D' x");
}

#[test]
fn git_branch_listing_only() {
    yes("git branch");
    yes("git branch -vv");
    yes("git branch -r");
    yes("git branch --merged main");
    yes("git branch --sort=-committerdate");
    no("git branch x");
    no("git branch -c a b");
    no("git branch -f x HEAD");
    no("git branch -u origin/x");
    no("git branch --set-upstream-to=origin/x");
    no("git branch -avD x");
}

#[test]
fn expansions_are_allowed_only_where_harmless() {
    yes("echo $HOME");
    yes("ls \"$HOME\"");
    yes("ls ${HOME}/x");
    yes("echo $?");
    no("find $HOME -name x");
    no("sed -n 1p *.txt");
    yes("sed -n 1p -- *.txt");
    no("git diff *.rs");
    yes("git diff -- *.rs");
}

#[test]
fn refusals_explain_themselves() {
    let r = check("git status && rm -rf x").unwrap_err();
    assert!(r.0.contains("`rm`"), "{r}");
    let r = check("cat a > b").unwrap_err();
    assert!(r.0.contains("redirect"), "{r}");
    let r = check("ls $(pwd)").unwrap_err();
    assert!(r.0.contains("command substitution"), "{r}");
}

#[test]
fn lexer_splits_words_like_a_shell() {
    let toks = lex(r#"a 'b c' "d\"e" f\ g 2>&1 h"#).unwrap();
    let words: Vec<String> = toks
        .iter()
        .filter_map(|t| match t {
            Tok::Word(w) => Some(w.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(words, vec!["a", "b c", "d\"e", "f g", "1", "h"]);
    assert!(toks.contains(&Tok::Redir(RedirKind::DupOut)));
}
