//! The checked tree of a file: every group and dataset, listed once, after checking that the
//! file is self-contained and that nothing it declares is larger than the file or the memory
//! budget. Every [`crate::Reader`] and [`crate::Editor`] walks it when it opens a file, before
//! any dataset is read or written.
//!
//! A checkpoint is data a researcher may have from someone else, and HDF5 lets a file name
//! other files: an external link, a dataset whose bytes live in an external raw file, a
//! virtual dataset that reads other `.h5` files. Reading through those would read files nobody
//! named (`/etc/passwd`, a FIFO that blocks), and writing through them (an injection) would
//! change them. So the walk refuses them all, naming the object and what it points to:
//!
//! 1. It follows hard links only, from the root, and looks at every link of every group it
//!    reaches. A hard link cannot leave the file. An external link (or any user-defined link
//!    type) is refused where it is found, without being followed.
//! 2. Every dataset reached is checked before anything reads it: its storage layout (virtual
//!    datasets refused), its external storage (refused), and its declared size (against the
//!    file's length when unfiltered, and against the memory budget).
//! 3. Soft links are looked at last. Once step 1 found no external link in any group reachable
//!    by hard links, a soft link can resolve only through links of those groups, so it stays in
//!    the file: it is resolved then, and must name an object the walk already listed.
//!
//! The walk is linear in the number of objects: identities go into hash sets.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use hdf5::LinkType;
use resilab_limits::Budget;

use crate::base::{DatasetInfo, Dtype, HASH_ATTR, MAX_DEPTH, caught, dtype_of, element_count, element_size, read_needs};
use crate::error::{Error, Result};

/// Every dataset (depth first in name order, each object once) and every group of a file.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tree {
    pub(crate) datasets: Vec<DatasetInfo>,
    pub(crate) groups: Vec<String>,
    /// Each dataset's position in `datasets`, by path.
    index: HashMap<String, usize>,
}

impl Tree {
    /// The walk's record of the dataset at `path` (`/a/b` or `a/b`) of `file`: only datasets the
    /// walk checked are read or written.
    pub(crate) fn dataset(&self, file: &Path, path: &str) -> Result<&DatasetInfo> {
        let i = match path.starts_with('/') {
            true => self.index.get(path),
            false => self.index.get(&format!("/{path}")),
        };
        let missing =
            || Error::Invalid { file: file.to_path_buf(), object: path.to_string(), message: "no such dataset in the file".into() };
        i.map(|&i| &self.datasets[i]).ok_or_else(missing)
    }
}

/// An object's identity in a file: file number and object token.
type Id = (u64, String);

/// State of one walk.
struct Walk<'a> {
    file: &'a Path,
    file_len: u64,
    budget: &'a Budget,
    root_fileno: u64,
    ancestors: Vec<Id>,
    seen: HashSet<Id>,
    tree: Tree,
    /// Soft links found, as (parent group path, link name), resolved after the hard walk.
    soft: Vec<(String, String)>,
}

impl Walk<'_> {
    fn invalid(&self, object: &str, message: String) -> Error {
        Error::Invalid { file: self.file.to_path_buf(), object: object.to_string(), message }
    }

    fn hdf5(&self, object: &str, e: hdf5::Error) -> Error {
        Error::Hdf5 { file: self.file.to_path_buf(), object: object.to_string(), message: e.to_string() }
    }
}

/// Walks `file` (opened from `path`) and checks it (see the module documentation).
pub(crate) fn walk(file: &hdf5::File, path: &Path, budget: &Budget) -> Result<Tree> {
    let file_len =
        std::fs::metadata(path).map_err(|e| Error::Invalid { file: path.to_path_buf(), object: "/".into(), message: e.to_string() })?.len();
    let root = file.as_group().map_err(|e| Error::Hdf5 { file: path.to_path_buf(), object: "/".into(), message: e.to_string() })?;
    let root_fileno =
        root.loc_info().map_err(|e| Error::Hdf5 { file: path.to_path_buf(), object: "/".into(), message: e.to_string() })?.fileno;
    let mut w = Walk {
        file: path,
        file_len,
        budget,
        root_fileno,
        ancestors: Vec::new(),
        seen: HashSet::new(),
        tree: Tree::default(),
        soft: Vec::new(),
    };
    let id = identity(&w, &root, "/")?;
    group(&mut w, &root, "", id)?;
    soft_links(&mut w, &root)?;
    Ok(w.tree)
}

fn identity(w: &Walk<'_>, loc: &hdf5::Location, path: &str) -> Result<Id> {
    let info = loc.loc_info().map_err(|e| w.hdf5(path, e))?;
    Ok((info.fileno, format!("{:?}", info.token)))
}

/// Lists group `g` (at `prefix`, `""` for the root) and everything below it by hard links.
fn group(w: &mut Walk<'_>, g: &hdf5::Group, prefix: &str, id: Id) -> Result<()> {
    let here = if prefix.is_empty() { "/" } else { prefix };
    if w.ancestors.len() >= MAX_DEPTH {
        return Err(w.invalid(here, format!("groups nest deeper than {MAX_DEPTH} levels")));
    }
    if w.ancestors.contains(&id) {
        return Err(w.invalid(here, "links back to a group that contains it (a cycle: the file is corrupt)".into()));
    }
    if !w.seen.insert(id.clone()) {
        return Ok(());
    }
    w.ancestors.push(id);
    w.tree.groups.push(here.to_string());
    let mut links = Vec::new();
    caught(|| {
        g.iter_visit_default(|name, info| {
            links.push((name.to_string(), info.link_type));
            Ok(())
        })
    })
    .map_err(|m| w.invalid(here, m))?
    .map_err(|e| w.hdf5(here, e))?;
    links.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, link) in links {
        let path = format!("{prefix}/{name}");
        match link {
            LinkType::Hard => hard_link(w, g, &name, &path)?,
            LinkType::Soft => w.soft.push((here.to_string(), name)),
            LinkType::External => return Err(w.invalid(&path, external_link(g, &name))),
        }
    }
    w.ancestors.pop();
    Ok(())
}

/// What an external (or user-defined) link points to, for its error.
fn external_link(g: &hdf5::Group, name: &str) -> String {
    let target = match crate::linkval::external_target(g, name) {
        Some((file, object)) => format!("{object} in the file {file}"),
        None => "an object outside this file (a link of a type resilab does not read)".into(),
    };
    format!("is an external link to {target}: resilab reads only self-contained files, and never follows a link out of one")
}

/// Follows the hard link `name` of `g` (at `path`): a group is walked, a dataset checked and
/// listed, a committed datatype skipped.
fn hard_link(w: &mut Walk<'_>, g: &hdf5::Group, name: &str, path: &str) -> Result<()> {
    let info = caught(|| g.loc_info_by_name(name)).map_err(|m| w.invalid(path, m))?.map_err(|e| w.hdf5(path, e))?;
    let id = (info.fileno, format!("{:?}", info.token));
    match info.loc_type {
        hdf5::LocationType::Group => {
            let sub = g.group(name).map_err(|e| w.hdf5(path, e))?;
            group(w, &sub, path, id)
        }
        hdf5::LocationType::Dataset => {
            if !w.seen.insert(id) {
                return Ok(());
            }
            let ds = g.dataset(name).map_err(|e| w.hdf5(path, e))?;
            let info = describe(&ds, path, w.file, w.file_len, w.budget)?;
            w.tree.index.insert(info.path.clone(), w.tree.datasets.len());
            w.tree.datasets.push(info);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Resolves every soft link found, now that no external link can be on its way: each must name
/// an object of this file that the walk listed.
fn soft_links(w: &mut Walk<'_>, root: &hdf5::Group) -> Result<()> {
    for (parent, name) in std::mem::take(&mut w.soft) {
        let path = if parent == "/" { format!("/{name}") } else { format!("{parent}/{name}") };
        let g = if parent == "/" { root.clone() } else { root.group(&parent).map_err(|e| w.hdf5(&parent, e))? };
        let target = crate::linkval::soft_target(&g, &name).unwrap_or_else(|| "?".into());
        let info = caught(|| g.loc_info_by_name(&name))
            .map_err(|m| w.invalid(&path, m))?
            .map_err(|_| w.invalid(&path, format!("is a soft link to {target}, which does not exist in the file")))?;
        let id = (info.fileno, format!("{:?}", info.token));
        if info.fileno != w.root_fileno || !w.seen.contains(&id) {
            return Err(w.invalid(&path, format!("is a soft link to {target}, which resolves outside the objects of this file")));
        }
    }
    Ok(())
}

/// A dataset's path, shape, type and stored digest, after checking that its storage is inside
/// the file and that the elements it declares fit in the file (unfiltered) and in the budget.
fn describe(ds: &hdf5::Dataset, path: &str, file: &Path, file_len: u64, budget: &Budget) -> Result<DatasetInfo> {
    let invalid = |message: String| Error::Invalid { file: file.to_path_buf(), object: path.to_string(), message };
    storage_is_inside(ds, &invalid)?;
    let filters = check_pipeline(ds, &invalid)?;
    let dtype = ds.dtype().and_then(|t| t.to_descriptor()).map(|d| dtype_of(&d)).unwrap_or(Dtype::Other);
    let elem = element_size(ds);
    let shape = ds.space().map_err(|e| Error::Hdf5 { file: file.to_path_buf(), object: path.to_string(), message: e.to_string() })?.shape();
    let bytes = element_count(&shape).and_then(|n| (n as u64).checked_mul(elem));
    let unfiltered = filters.is_empty();
    if unfiltered && bytes.is_none_or(|b| b > file_len) {
        return Err(invalid(format!(
            "claims shape {shape:?} of {elem}-byte elements, more than the file's {file_len} bytes can hold (a corrupt dataspace)"
        )));
    }
    let needs = read_needs(ds, bytes, unfiltered);
    if !budget.admits(needs) {
        return Err(invalid(format!(
            "declares shape {shape:?} of {elem}-byte elements{}: {}, more than the memory budget of {}",
            if unfiltered { "" } else { " (compressed; with the HDF5 library's buffer for one chunk)" },
            resilab_limits::needed(needs),
            budget.describe()
        )));
    }
    let stored_hash = ds.attr(HASH_ATTR).ok().and_then(|a| a.read_scalar::<u64>().ok());
    Ok(DatasetInfo { path: path.to_string(), shape, dtype, stored_hash })
}

/// The filters of a dataset's pipeline, after refusing one that names a filter HDF5 does not
/// build in (its plugin would be code from outside resilab) or whose pipeline cannot be read.
pub(crate) fn check_pipeline(ds: &hdf5::Dataset, invalid: &dyn Fn(String) -> Error) -> Result<Vec<hdf5::filters::Filter>> {
    let unreadable = |e: String| invalid(format!("its filter pipeline cannot be read ({e})"));
    let dcpl = ds.create_plist().map_err(|e| unreadable(e.to_string()))?;
    let filters = caught(|| dcpl.get_filters()).map_err(unreadable)?.map_err(|e| unreadable(e.to_string()))?;
    for f in &filters {
        let id = f.id();
        if !crate::plugins::BUILT_IN.iter().any(|&(b, _)| b == id) {
            let known: Vec<String> = crate::plugins::BUILT_IN.iter().map(|(b, n)| format!("{n} ({b})")).collect();
            return Err(invalid(format!(
                "needs the HDF5 filter with id {id}, which is not built into the HDF5 library: resilab reads only \
                 datasets stored with the built-in filters ({}) and never loads a filter plugin",
                known.join(", ")
            )));
        }
    }
    Ok(filters)
}

/// Refuses a dataset whose elements live outside the file: a virtual dataset (its elements are
/// other datasets, in this or other files) or one with external storage (raw files).
fn storage_is_inside(ds: &hdf5::Dataset, invalid: &dyn Fn(String) -> Error) -> Result<()> {
    let dcpl = ds.create_plist().map_err(|e| invalid(format!("its storage layout cannot be read ({e})")))?;
    let layout = dcpl.get_layout().map_err(|e| invalid(format!("its storage layout cannot be read ({e})")))?;
    if layout == hdf5::dataset::Layout::Virtual {
        let sources: Vec<String> =
            dcpl.get_virtual_map().unwrap_or_default().iter().take(3).map(|m| format!("{}:{}", m.src_filename, m.src_dataset)).collect();
        let sources = if sources.is_empty() { "other datasets".to_string() } else { sources.join(", ") };
        return Err(invalid(format!(
            "is a virtual dataset reading {sources}: resilab reads only self-contained files, whose datasets keep their own bytes"
        )));
    }
    let external = dcpl.get_external().map_err(|e| invalid(format!("its external storage list cannot be read ({e})")))?;
    if let Some(first) = external.first() {
        let more = if external.len() > 1 { format!(" and {} more", external.len() - 1) } else { String::new() };
        return Err(invalid(format!(
            "keeps its bytes in the external file {:?}{more}: resilab reads and writes only self-contained files, never through external storage",
            first.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Editor, Reader, Writer};
    use std::time::{Duration, Instant};

    fn budget(bytes: u64) -> Budget {
        Budget { bytes, source: "test".into() }
    }

    /// A resilab-written file with one f32 dataset `/model/w` of four values.
    fn plain(dir: &Path, name: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        let w = Writer::create(&p).unwrap();
        w.write_f32("/model/w", &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        w.close().unwrap();
        p
    }

    fn rw(p: &Path) -> hdf5::File {
        hdf5::File::with_options().with_fapl(|f| f.file_locking(false)).open_rw(p).unwrap()
    }

    fn refused(p: &Path) -> String {
        let r = Reader::open(p).err().expect("the reader must refuse").to_string();
        let e = Editor::open(p).err().expect("the editor must refuse").to_string();
        assert_eq!(r, e);
        r
    }

    /// Runs `f` on another thread and fails if it takes longer than `limit` (a FIFO opened for
    /// reading blocks until a writer comes).
    fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit).expect("blocked: a file nobody named was opened")
    }

    #[test]
    fn an_external_link_is_refused_naming_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let victim = plain(dir.path(), "victim.h5");
        let p = plain(dir.path(), "ext.h5");
        let f = rw(&p);
        f.group("/model").unwrap().link_external(victim.to_str().unwrap(), "/model/w", "other").unwrap();
        f.close().unwrap();
        let e = refused(&p);
        assert!(e.contains("/model/other") && e.contains("external link") && e.contains("victim.h5") && e.contains("/model/w"), "{e}");
    }

    #[test]
    fn a_soft_link_into_an_external_link_is_refused_and_one_inside_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = plain(dir.path(), "victim.h5");
        let p = plain(dir.path(), "soft.h5");
        let f = rw(&p);
        f.link_external(victim.to_str().unwrap(), "/model", "elsewhere").unwrap();
        f.group("/model").unwrap().link_soft("/elsewhere/w", "v").unwrap();
        f.close().unwrap();
        let e = refused(&p);
        assert!(e.contains("/elsewhere") && e.contains("victim.h5"), "{e}");

        let ok = plain(dir.path(), "inside.h5");
        let f = rw(&ok);
        f.link_soft("/model/w", "alias").unwrap();
        f.link_soft("/model", "models").unwrap();
        f.close().unwrap();
        let r = Reader::open(&ok).unwrap();
        let paths: Vec<String> = r.datasets().unwrap().into_iter().map(|d| d.path).collect();
        assert_eq!(paths, ["/model/w"], "each object is listed once, under its hard name");
        assert_eq!(r.read_f32("/alias", &[4]).unwrap(), [1.0, 2.0, 3.0, 4.0]);

        let dangling = plain(dir.path(), "dangling.h5");
        let f = rw(&dangling);
        f.link_soft("/model/none", "ghost").unwrap();
        f.close().unwrap();
        let e = refused(&dangling);
        assert!(e.contains("/ghost") && e.contains("/model/none") && e.contains("does not exist"), "{e}");
    }

    #[test]
    fn external_storage_is_refused_before_the_external_file_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("victim.raw");
        std::fs::write(&raw, [7u8; 16]).unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        for (name, target) in [("raw.h5", &raw), ("fifo.h5", &fifo)] {
            let p = plain(dir.path(), name);
            let f = rw(&p);
            f.new_dataset::<f32>().shape([4]).external(target.to_str().unwrap(), 0, 16).create("stolen").unwrap();
            f.close().unwrap();
            let e = within(Duration::from_secs(20), move || refused(&p));
            assert!(e.contains("/stolen") && e.contains("external file") && e.contains(target.to_str().unwrap()), "{e}");
        }
        assert_eq!(std::fs::read(&raw).unwrap(), [7u8; 16]);
    }

    #[test]
    fn a_virtual_dataset_is_refused_before_its_sources_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("source.h5");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let p = plain(dir.path(), "vds.h5");
        let f = rw(&p);
        f.new_dataset::<f32>().shape([4]).virtual_map(fifo.to_str().unwrap(), "/model/w", [4], .., [4], ..).create("view").unwrap();
        f.close().unwrap();
        let e = within(Duration::from_secs(20), move || refused(&p));
        assert!(e.contains("/view") && e.contains("virtual dataset") && e.contains("source.h5"), "{e}");
    }

    #[test]
    fn a_read_over_the_budget_is_an_over_budget_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = plain(dir.path(), "w.h5");
        let file = hdf5::File::open(&p).unwrap();
        let ds = file.dataset("/model/w").unwrap();
        crate::base::admit(&ds, &p, "/model/w", &budget(16)).unwrap();
        let e = crate::base::admit(&ds, &p, "/model/w", &budget(15)).unwrap_err();
        assert!(matches!(&e, Error::OverBudget { needs: Some(16), object, .. } if object == "/model/w"), "{e:?}");
        assert!(
            e.to_string()
                .ends_with("w.h5: /model/w: reading it needs 16 bytes (16 B), more than is left of the memory budget of 15 B (test)"),
            "{e}"
        );
    }

    #[test]
    fn declared_sizes_are_held_to_the_budget_and_compressed_ones_only_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = plain(dir.path(), "bomb.h5");
        let f = rw(&p);
        // About 4 GiB of zeros declared, a few kilobytes stored.
        f.new_dataset::<f32>().shape([1usize << 30]).chunk([1usize << 20]).deflate(9).create("bomb").unwrap();
        f.close().unwrap();
        let b = budget(1 << 30);
        let file = hdf5::File::open(&p).unwrap();
        let e = walk(&file, &p, &b).unwrap_err().to_string();
        assert!(e.contains("/bomb") && e.contains("4.00 GiB") && e.contains("memory budget of 1.00 GiB (test)"), "{e}");
        assert!(walk(&file, &p, &budget(8 << 30)).is_ok(), "a compressed dataset may declare more than the file holds");
    }

    /// A file of `n` empty groups side by side, as a hostile file of 40 MB holds 200,000.
    fn groups_file(dir: &Path, n: usize) -> std::path::PathBuf {
        let p = plain(dir, &format!("groups{n}.h5"));
        let f = rw(&p);
        let g = f.create_group("many").unwrap();
        for i in 0..n {
            g.create_group(&format!("g{i:06}")).unwrap();
        }
        drop(g);
        f.close().unwrap();
        p
    }

    /// The fastest of three opens of `p` (the least disturbed by other work on the machine).
    fn fastest_open(p: &Path, groups: usize) -> Duration {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                let r = Reader::open(p).unwrap();
                let took = t.elapsed();
                assert_eq!(r.groups().unwrap().len(), groups + 3);
                took
            })
            .min()
            .unwrap()
    }

    #[test]
    fn the_walk_is_linear_in_the_number_of_groups() {
        // Four times the groups: about four times the time when linear, sixteen when quadratic
        // (the quadratic walk took 11.3 s for 50,000 groups, the linear one 3.5 s for 200,000).
        // A ratio, not a bound in seconds, so that a loaded machine slows both alike.
        let dir = tempfile::tempdir().unwrap();
        let (small, large) = (15_000, 60_000);
        let (a, b) = (groups_file(dir.path(), small), groups_file(dir.path(), large));
        let (t1, t4) = (fastest_open(&a, small), fastest_open(&b, large));
        let ratio = t4.as_secs_f64() / t1.as_secs_f64();
        assert!(ratio < 8.0, "{small} groups in {t1:?}, {large} in {t4:?}: {ratio:.1}x");
    }

    #[test]
    fn opening_any_file_turns_plugin_loading_off_and_built_in_filters_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.h5");
        let w = Writer::create(&p).unwrap();
        w.write_f32("/model/w", &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        w.close().unwrap();
        assert_eq!(crate::plugins::loading_state(), 0, "plugins are still loadable after a file was created");
        let f = crate::base::open_rw_unlocked(&p).unwrap();
        f.new_dataset::<f32>().shape([64]).chunk([16]).shuffle().deflate(4).fletcher32().create("packed").unwrap();
        f.close().unwrap();
        let r = Reader::open(&p).unwrap();
        assert_eq!(r.read_f32("/packed", &[64]).unwrap(), vec![0.0; 64], "built-in filters are read");
        assert_eq!(crate::plugins::loading_state(), 0);
    }

    #[test]
    fn the_built_in_list_is_hdf5s() {
        // H5Zpublic.h: H5Z_FILTER_DEFLATE 1 ... H5Z_FILTER_SCALEOFFSET 6, H5Z_FILTER_RESERVED 256.
        let ids: Vec<i32> = crate::plugins::BUILT_IN.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
        assert_eq!(hdf5_sys::h5z::H5Z_FILTER_SCALEOFFSET, 6);
    }
}
