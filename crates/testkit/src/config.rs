//! The tiny run configuration and a way to vary it by key.

/// A tiny run: ResNet-8 at quarter width on 16x16 synthetic images, 8 steps of 32 images,
/// plain SGD. Seconds to train; the tests and the fuzzing harness start from it.
pub const TINY: &str = r#"
seed = 7

[data]
source = "synthetic"
train_size = 128
test_size = 64
image_size = 16
difficulty = 0.3

[model]
arch = "resnet"
depth = 8
width = 0.25

[train]
steps = 8
batch_size = 32
log_every = 2
eval_every = 4

[optimizer]
kind = "sgd"
lr = 0.05
"#;

/// `text` (a configuration laid out as [`TINY`] is: one `key = value` a line, sections as
/// `[name]` lines) with `key` (`section.key`, or a top-level key) set to `value` (TOML, as
/// written): its line replaced, or added at the end of its section, or the section added at
/// the end of the text.
pub fn set(text: &str, key: &str, value: &str) -> String {
    let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
    let line = format!("{name} = {value}");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header = |l: &str| l.starts_with('[') && l.ends_with(']');
    let start = match section {
        "" => Some(0),
        _ => lines.iter().position(|l| l.trim() == format!("[{section}]")).map(|i| i + 1),
    };
    let Some(start) = start else {
        let sep = if text.ends_with('\n') { "" } else { "\n" };
        return format!("{text}{sep}\n[{section}]\n{line}\n");
    };
    let end = lines[start..].iter().position(|l| header(l.trim())).map_or(lines.len(), |i| start + i);
    match lines[start..end].iter().position(|l| l.split_once('=').is_some_and(|(k, _)| k.trim() == name)) {
        Some(i) => lines[start + i] = line,
        None => {
            // After the section's last non-blank line.
            let at = (start..end).rev().find(|&i| !lines[i].trim().is_empty()).map_or(start, |i| i + 1);
            lines.insert(at, line);
        }
    }
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_replaced_in_its_section_or_added_to_it() {
        let t = set(TINY, "train.steps", "4");
        assert!(t.contains("\n[train]\nsteps = 4\nbatch_size = 32\n") && !t.contains("steps = 8"), "{t}");
        let t = set(TINY, "optimizer.momentum", "0.9");
        assert!(t.ends_with("[optimizer]\nkind = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n"), "{t}");
        let t = set(TINY, "data.classes", "4");
        assert!(t.contains("difficulty = 0.3\nclasses = 4\n\n[model]"), "{t}");
        let t = set(TINY, "checkpoint.every_steps", "4");
        assert!(t.ends_with("lr = 0.05\n\n[checkpoint]\nevery_steps = 4\n"), "{t}");
        assert!(set(TINY, "seed", "9").starts_with("\nseed = 9\n\n[data]"));
        // `steps` in [train] only: `eval_every` and the other sections' keys stay.
        assert_eq!(set(TINY, "train.steps", "8"), TINY);
    }
}
