//! A ZIP archive's layout, checked as the strictest reader would read it, before any reader
//! opens it.
//!
//! Readers of one archive can disagree about what it holds. `torch.load` (miniz) finds an entry
//! by its name in the central directory, comparing names without regard to ASCII case, and of two
//! entries with one name takes the first; the `zip` crate (resilab's pickle check and Burn's
//! reader) takes the last; a streaming reader walks the local headers from byte 0 and never
//! looks at the central directory. A file made to read differently in each could show resilab
//! a clean state_dict and PyTorch a pickle that runs code.
//!
//! [`check`] accepts an archive only where every reader must agree:
//!
//! - every name appears once, compared as miniz compares them (ASCII case folded);
//! - every local header says what its central directory entry says: the name, the compression
//!   method, whether a data descriptor follows, the sizes and the CRC where it gives them (a
//!   data descriptor, when there is one, gives the same sizes and CRC);
//! - every byte of the file is claimed by exactly one record: the entries (local header, data,
//!   data descriptor) back to back from byte 0, then the central directory, the ZIP64 end
//!   record and its locator when there are any, and the end record with its comment, which ends
//!   the file. Padding that `torch.save` puts in a local header's extra field is claimed by that
//!   header.
//!
//! Only the methods a ZIP reader here can decompress (stored, deflate) are accepted, and no
//! encrypted entry or split archive. Every offset and length the file gives is checked against
//! the file's length before it is read, and nothing read is larger than a header, a data
//! descriptor or the central directory (at most [`MAX_CENTRAL`] bytes).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};

/// One entry of a checked archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name, as the central directory gives it (lossy UTF-8).
    pub name: String,
    /// Its uncompressed size in bytes.
    pub size: u64,
}

/// The largest central directory read: far above any checkpoint's (about 100 bytes an entry).
pub const MAX_CENTRAL: u64 = 64 << 20;

const LOCAL_SIG: u64 = 0x0403_4b50;
const LOCAL_LEN: u64 = 30;
const CENTRAL_SIG: u64 = 0x0201_4b50;
const CENTRAL_LEN: usize = 46;
const DESCRIPTOR_SIG: u64 = 0x0807_4b50;
const END_SIG: u64 = 0x0605_4b50;
const END_LEN: usize = 22;
const LOCATOR_SIG: u64 = 0x0706_4b50;
const LOCATOR_LEN: u64 = 20;
const ZIP64_END_SIG: u64 = 0x0606_4b50;
const ZIP64_END_LEN: u64 = 56;
/// The extra-field block that holds ZIP64 sizes and offsets.
const ZIP64_EXTRA: u16 = 0x0001;
/// General-purpose flags: encrypted, a data descriptor follows, strong encryption, masked headers.
const ENCRYPTED: u16 = 1;
const DESCRIPTOR: u16 = 1 << 3;
const STRONG_ENCRYPTION: u16 = 1 << 6;
const MASKED: u16 = 1 << 13;
const SAT16: u64 = 0xffff;
const SAT32: u64 = 0xffff_ffff;

type Check<T> = std::result::Result<T, String>;

/// Little-endian fields of a record read into memory, every read bounds-checked.
struct Le<'a>(&'a [u8]);

impl Le<'_> {
    fn n(&self, at: usize, width: usize) -> Check<u64> {
        let bytes = self.0.get(at..at + width).ok_or("a record is cut short by the end of its bytes")?;
        Ok(bytes.iter().rev().fold(0u64, |n, &b| (n << 8) | u64::from(b)))
    }
    fn u16(&self, at: usize) -> Check<u64> {
        self.n(at, 2)
    }
    fn u32(&self, at: usize) -> Check<u64> {
        self.n(at, 4)
    }
    fn u64(&self, at: usize) -> Check<u64> {
        self.n(at, 8)
    }
}

/// `len` bytes at `at`, which the caller has checked lie within the file.
fn read_at<R: Read + Seek>(r: &mut R, at: u64, len: u64) -> Check<Vec<u8>> {
    let io = |e: std::io::Error| format!("cannot be read: {e}");
    r.seek(SeekFrom::Start(at)).map_err(io)?;
    let mut bytes = Vec::new();
    r.take(len).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 != len {
        return Err(format!("ends at byte {}, inside a record that runs to byte {}", at + bytes.len() as u64, at + len));
    }
    Ok(bytes)
}

/// Where the archive's end records say its central directory is.
#[derive(Debug)]
struct End {
    /// The central directory's offset, length and entry count.
    central: u64,
    central_len: u64,
    entries: u64,
    /// Where the records after the central directory start (the ZIP64 end record, else the
    /// end record).
    after_central: u64,
}

/// Checks the archive of `len` bytes in `r`; returns its entries in central-directory order.
/// The error says what is wrong, naming the entry.
pub fn check<R: Read + Seek>(r: &mut R, len: u64) -> Check<Vec<Entry>> {
    let end = find_end(r, len)?;
    let central = read_central(r, &end)?;
    distinct_names(&central)?;
    let mut spans = Vec::with_capacity(central.len());
    for c in &central {
        spans.push((c.offset, check_local(r, c, len)?, c.name.as_str()));
    }
    covered(spans, &end)?;
    Ok(central.into_iter().map(|c| Entry { name: c.name, size: c.size }).collect())
}

/// Finds the end record (ending the file, its comment included) and the ZIP64 records before it.
fn find_end<R: Read + Seek>(r: &mut R, len: u64) -> Check<End> {
    let tail_len = len.min(END_LEN as u64 + SAT16);
    let tail = read_at(r, len - tail_len, tail_len)?;
    let ends_file = |p: usize| {
        let t = Le(&tail);
        t.u32(p).is_ok_and(|s| s == END_SIG) && t.u16(p + 20).is_ok_and(|c| p + END_LEN + c as usize == tail.len())
    };
    let Some(p) = (0..=tail.len().saturating_sub(END_LEN)).rev().find(|&p| ends_file(p)) else {
        let any = tail.windows(4).any(|w| w == (END_SIG as u32).to_le_bytes());
        return Err(if any {
            "bytes follow its end-of-central-directory record that no record claims".into()
        } else {
            "no end-of-central-directory record".into()
        });
    };
    let at = len - tail_len + p as u64;
    let e = Le(&tail[p..]);
    let (disk, central_disk, entries_here, entries) = (e.u16(4)?, e.u16(6)?, e.u16(8)?, e.u16(10)?);
    let (central_len, central) = (e.u32(12)?, e.u32(16)?);
    if disk != 0 || central_disk != 0 || entries_here != entries {
        return Err("it is split across disks, which no PyTorch file is".into());
    }
    let locator = at.checked_sub(LOCATOR_LEN).map(|l| read_at(r, l, LOCATOR_LEN)).transpose()?;
    match locator {
        Some(l) if Le(&l).u32(0)? == LOCATOR_SIG => {
            zip64_end(r, &Le(&l), at - LOCATOR_LEN, [(entries, SAT16), (central_len, SAT32), (central, SAT32)])
        }
        _ => Ok(End { central, central_len, entries, after_central: at }),
    }
}

/// The ZIP64 end record the locator (at `locator_at`) points to, which must end where the
/// locator starts; the end record's own fields must be its values or saturated.
fn zip64_end<R: Read + Seek>(r: &mut R, locator: &Le, locator_at: u64, plain: [(u64, u64); 3]) -> Check<End> {
    let (disk, at, disks) = (locator.u32(4)?, locator.u64(8)?, locator.u32(16)?);
    if disk != 0 || disks > 1 {
        return Err("it is split across disks, which no PyTorch file is".into());
    }
    if at.checked_add(ZIP64_END_LEN).is_none_or(|end| end > locator_at) {
        return Err(format!("its ZIP64 end record at byte {at} does not lie before its locator at byte {locator_at}"));
    }
    let bytes = read_at(r, at, ZIP64_END_LEN)?;
    let z = Le(&bytes);
    if z.u32(0)? != ZIP64_END_SIG {
        return Err(format!("its ZIP64 locator points to byte {at}, where no ZIP64 end record starts"));
    }
    let record_end = z.u64(4)?.checked_add(12).and_then(|n| n.checked_add(at));
    if record_end != Some(locator_at) {
        return Err(format!(
            "its ZIP64 end record at byte {at} does not end where its locator starts (byte {locator_at}): bytes between them that no record claims"
        ));
    }
    if z.u32(16)? != 0 || z.u32(20)? != 0 || z.u64(24)? != z.u64(32)? {
        return Err("it is split across disks, which no PyTorch file is".into());
    }
    let (entries, central_len, central) = (z.u64(32)?, z.u64(40)?, z.u64(48)?);
    for ((value, saturated), wide) in plain.into_iter().zip([entries, central_len, central]) {
        if value != saturated && value != wide {
            return Err("its end record and its ZIP64 end record disagree on where the central directory is".into());
        }
    }
    Ok(End { central, central_len, entries, after_central: at })
}

/// An entry of the central directory.
#[derive(Debug)]
struct Central {
    index: usize,
    name: String,
    raw_name: Vec<u8>,
    flags: u16,
    method: u16,
    crc: u32,
    compressed: u64,
    size: u64,
    offset: u64,
}

/// Reads the central directory, which must end where the records after it start and hold
/// exactly the entries the end record counts.
fn read_central<R: Read + Seek>(r: &mut R, end: &End) -> Check<Vec<Central>> {
    if end.central.checked_add(end.central_len) != Some(end.after_central) {
        return Err(format!(
            "its central directory (byte {}, {} bytes) does not end where its end records start (byte {}): bytes that no record claims, or records that overlap",
            end.central, end.central_len, end.after_central
        ));
    }
    if end.central_len > MAX_CENTRAL {
        return Err(format!("its central directory is {} bytes, above the {MAX_CENTRAL} bytes resilab reads", end.central_len));
    }
    let bytes = read_at(r, end.central, end.central_len)?;
    let mut at = 0usize;
    let mut out = Vec::new();
    while at < bytes.len() {
        if out.len() as u64 >= end.entries {
            return Err(format!("its central directory holds bytes after its {} entries that no entry claims", end.entries));
        }
        let (c, len) = central_entry(&bytes[at..], out.len()).map_err(|e| format!("central directory entry {}: {e}", out.len() + 1))?;
        out.push(c);
        at += len;
    }
    if out.len() as u64 != end.entries {
        return Err(format!("its end record counts {} entries, its central directory holds {}", end.entries, out.len()));
    }
    Ok(out)
}

/// One central directory entry at the start of `b`, and its length.
fn central_entry(b: &[u8], index: usize) -> Check<(Central, usize)> {
    let e = Le(b);
    if e.u32(0)? != CENTRAL_SIG {
        return Err("no central directory entry starts where the previous one ends".into());
    }
    let (flags, method) = (e.u16(8)? as u16, e.u16(10)? as u16);
    let (crc, mut compressed, mut size) = (e.u32(16)? as u32, e.u32(20)?, e.u32(24)?);
    let (name_len, extra_len, comment_len) = (e.u16(28)? as usize, e.u16(30)? as usize, e.u16(32)? as usize);
    let (mut disk, mut offset) = (e.u16(34)?, e.u32(42)?);
    let len = CENTRAL_LEN + name_len + extra_len + comment_len;
    let raw_name = b.get(CENTRAL_LEN..CENTRAL_LEN + name_len).ok_or("cut short by the end of the central directory")?.to_vec();
    let name = shown(&raw_name);
    let extra = b.get(CENTRAL_LEN + name_len..CENTRAL_LEN + name_len + extra_len).ok_or("cut short by the end of the central directory")?;
    b.get(..len).ok_or("cut short by the end of the central directory")?;
    if let Some(z) = extra_block(extra, ZIP64_EXTRA).map_err(|e| format!("{name}: {e}"))? {
        // The ZIP64 block holds, in this order, each field that is saturated.
        let z = Le(z);
        let mut at = 0;
        for (field, width) in [(&mut size, 8), (&mut compressed, 8), (&mut offset, 8), (&mut disk, 4)] {
            if *field == if width == 8 { SAT32 } else { SAT16 } {
                *field = z.n(at, width).map_err(|_| format!("{name}: its ZIP64 extra field lacks a saturated size or offset"))?;
                at += width;
            }
        }
    }
    let c = Central { index, name, raw_name, flags, method, crc, compressed, size, offset };
    if disk != 0 {
        return Err(format!("{}: on another disk, which no PyTorch file is", c.name));
    }
    if flags & (ENCRYPTED | STRONG_ENCRYPTION | MASKED) != 0 {
        return Err(format!("{}: encrypted, which no PyTorch file is", c.name));
    }
    if !matches!(method, 0 | 8) {
        return Err(format!("{}: compression method {method}, which resilab does not read (torch.save stores entries)", c.name));
    }
    if method == 0 && compressed != size {
        return Err(format!("{}: stored, yet its compressed size ({compressed}) is not its size ({size})", c.name));
    }
    Ok((c, len))
}

/// The data of the first extra-field block with `id`; the field must be whole blocks.
fn extra_block(extra: &[u8], id: u16) -> Check<Option<&[u8]>> {
    let mut at = 0;
    let mut found = None;
    while at < extra.len() {
        let e = Le(extra);
        let (block, len) = (
            e.u16(at).map_err(|_| "its extra field ends inside a block header")?,
            e.u16(at + 2).map_err(|_| "its extra field ends inside a block header")?,
        );
        let data = extra.get(at + 4..at + 4 + len as usize).ok_or("its extra field ends inside a block")?;
        if block == u64::from(id) && found.is_none() {
            found = Some(data);
        }
        at += 4 + len as usize;
    }
    Ok(found)
}

/// A name for a message: lossy UTF-8, control characters escaped, at most 200 characters.
fn shown(name: &[u8]) -> String {
    let escaped: String = String::from_utf8_lossy(name).chars().flat_map(char::escape_debug).collect();
    match escaped.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &escaped[..end]),
        None => escaped,
    }
}

/// Refuses two entries whose names are equal with ASCII case folded (miniz's comparison).
fn distinct_names(central: &[Central]) -> Check<()> {
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::with_capacity(central.len());
    for c in central {
        if let Some(first) = seen.insert(c.raw_name.to_ascii_lowercase(), c.index) {
            let same = if central[first].raw_name == c.raw_name { String::new() } else { format!(" as {}", central[first].name) };
            return Err(format!(
                "entry {} appears twice{same} (entries {} and {} of its central directory): torch.load reads the first, other readers the last",
                c.name,
                first + 1,
                c.index + 1
            ));
        }
    }
    Ok(())
}

/// Checks the local header, data and data descriptor of `c` against its central directory
/// entry; returns where they end.
fn check_local<R: Read + Seek>(r: &mut R, c: &Central, len: u64) -> Check<u64> {
    let name = &c.name;
    if c.offset.checked_add(LOCAL_LEN).is_none_or(|e| e > len) {
        return Err(format!("entry {name}: its local header (byte {}) lies past the end of the file", c.offset));
    }
    let fixed = read_at(r, c.offset, LOCAL_LEN)?;
    let l = Le(&fixed);
    if l.u32(0)? != LOCAL_SIG {
        return Err(format!("entry {name}: no local header starts at byte {}, where its central directory entry points", c.offset));
    }
    let (flags, method, crc) = (l.u16(6)? as u16, l.u16(8)? as u16, l.u32(14)? as u32);
    let (mut compressed, mut size, name_len, extra_len) = (l.u32(18)?, l.u32(22)?, l.u16(26)?, l.u16(28)?);
    let data = c.offset + LOCAL_LEN + name_len + extra_len;
    if data > len {
        return Err(format!("entry {name}: its local header runs past the end of the file"));
    }
    let rest = read_at(r, c.offset + LOCAL_LEN, name_len + extra_len)?;
    let (local_name, extra) = rest.split_at(name_len as usize);
    let disagree = |what: &str| format!("entry {name}: its local header disagrees with its central directory entry on {what}");
    if local_name != c.raw_name.as_slice() {
        return Err(format!("{} (local name {})", disagree("its name"), shown(local_name)));
    }
    if method != c.method {
        return Err(disagree(&format!("its compression method ({method}, {})", c.method)));
    }
    if flags & (DESCRIPTOR | ENCRYPTED) != c.flags & (DESCRIPTOR | ENCRYPTED) {
        return Err(disagree("whether a data descriptor follows its data"));
    }
    let zip64 = extra_block(extra, ZIP64_EXTRA).map_err(|e| format!("entry {name}: its local header: {e}"))?;
    if size == SAT32 || compressed == SAT32 {
        let z = Le(zip64.ok_or_else(|| disagree("its sizes (saturated, without a ZIP64 extra field)"))?);
        (size, compressed) = (z.u64(0).map_err(|_| disagree("its sizes"))?, z.u64(8).map_err(|_| disagree("its sizes"))?);
    }
    let descriptor = flags & DESCRIPTOR != 0;
    // With a data descriptor the local header may leave the CRC and sizes 0.
    let given = |v: u64| !(descriptor && v == 0);
    if given(crc.into()) && crc != c.crc {
        return Err(disagree(&format!("its CRC ({crc:08x}, {:08x})", c.crc)));
    }
    if (given(size) && size != c.size) || (given(compressed) && compressed != c.compressed) {
        return Err(disagree(&format!("its sizes ({compressed} and {size} bytes, {} and {})", c.compressed, c.size)));
    }
    let data_end = data.checked_add(c.compressed).filter(|&e| e <= len);
    let data_end = data_end.ok_or_else(|| format!("entry {name}: its {} bytes of data run past the end of the file", c.compressed))?;
    if !descriptor {
        return Ok(data_end);
    }
    data_descriptor(r, c, data_end, zip64.is_some(), len)
}

/// Checks the data descriptor at `at` (8-byte sizes when the local header has a ZIP64 extra
/// field, the signature optional); returns where it ends.
fn data_descriptor<R: Read + Seek>(r: &mut R, c: &Central, at: u64, wide: bool, len: u64) -> Check<u64> {
    let width = if wide { 8 } else { 4 };
    let most = (4 + 4 + 2 * width as u64).min(len - at);
    let bytes = read_at(r, at, most)?;
    let d = Le(&bytes);
    let signed = d.u32(0).is_ok_and(|s| s == DESCRIPTOR_SIG);
    let start = if signed { 4 } else { 0 };
    let cut = |_| format!("entry {}: its data descriptor runs past the end of the file", c.name);
    let (crc, compressed, size) =
        (d.u32(start).map_err(cut)?, d.n(start + 4, width).map_err(cut)?, d.n(start + 4 + width, width).map_err(cut)?);
    if crc != u64::from(c.crc) || compressed != c.compressed || size != c.size {
        return Err(format!(
            "entry {}: its data descriptor (CRC {crc:08x}, {compressed} and {size} bytes) disagrees with its central directory entry (CRC {:08x}, {} and {} bytes)",
            c.name, c.crc, c.compressed, c.size
        ));
    }
    Ok(at + (start + 4 + 2 * width) as u64)
}

/// The entries, `(start, end, name)`, must lie back to back from byte 0 up to the central
/// directory.
fn covered(mut spans: Vec<(u64, u64, &str)>, end: &End) -> Check<()> {
    spans.sort_by_key(|s| s.0);
    let mut next = (0u64, None::<&str>);
    for (start, stop, name) in spans {
        if start < next.0 {
            return Err(format!("entry {name} (byte {start}) overlaps entry {} (up to byte {})", next.1.unwrap_or("?"), next.0));
        }
        if start > next.0 {
            return Err(unclaimed(next, start, Some(name)));
        }
        next = (stop, Some(name));
    }
    match next.0.cmp(&end.central) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(unclaimed(next, end.central, None)),
        std::cmp::Ordering::Greater => {
            Err(format!("entry {} (up to byte {}) overlaps its central directory (byte {})", next.1.unwrap_or("?"), next.0, end.central))
        }
    }
}

fn unclaimed((from, after): (u64, Option<&str>), to: u64, before: Option<&str>) -> String {
    let after = after.map_or("at the start of the file".to_string(), |n| format!("after entry {n}"));
    let before = before.map_or("before its central directory".to_string(), |n| format!("before entry {n}"));
    format!("bytes {from} to {to} {after}, {before}, belong to no entry")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Cursor, Write};
    use std::path::Path;

    use super::*;

    fn check_bytes(b: &[u8]) -> Check<Vec<Entry>> {
        check(&mut Cursor::new(b), b.len() as u64)
    }

    /// An archive written by the `zip` crate, entries stored.
    fn archive(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        for (name, data) in entries {
            z.start_file(*name, options).unwrap();
            z.write_all(data).unwrap();
        }
        z.finish().unwrap().into_inner()
    }

    fn find(hay: &[u8], needle: &[u8]) -> usize {
        hay.windows(needle.len()).position(|w| w == needle).unwrap()
    }

    fn set32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pytorch").join(name)).unwrap()
    }

    #[test]
    fn torch_save_archives_pass_with_their_padding_descriptors_and_zip64_end() {
        for name in ["resnet8.pt", "resnet8-train.pt", "code.pt", "resnet8-stride.pt"] {
            let entries = check_bytes(&fixture(name)).unwrap();
            assert!(entries.iter().any(|e| e.name.ends_with("/data.pkl")), "{name}");
        }
        let entries = check_bytes(&fixture("code.pt")).unwrap();
        assert_eq!(entries.iter().find(|e| e.name == "code/data/0").map(|e| e.size), Some(8));
        let plain = archive(&[("a/data.pkl", b"pickle"), ("a/data/0", &[0; 8])]);
        assert_eq!(check_bytes(&plain).unwrap().len(), 2);
        // A comment is part of the end record.
        let mut commented = plain.clone();
        let end = commented.len() - END_LEN;
        commented[end + 20] = 3;
        commented.extend_from_slice(b"hi!");
        check_bytes(&commented).unwrap();
    }

    #[test]
    fn a_repeated_name_is_refused_whatever_its_case() {
        // The zip crate writes no name twice: the third entry is renamed in its headers.
        let mut twice = archive(&[("a/data.pkl", b"one"), ("a/data/0", b""), ("a/data.pkX", b"two")]);
        for _ in 0..2 {
            let at = find(&twice, b"a/data.pkX");
            twice[at + 9] = b'l';
        }
        let e = check_bytes(&twice).unwrap_err();
        assert_eq!(
            e,
            "entry a/data.pkl appears twice (entries 1 and 3 of its central directory): torch.load reads the first, other readers the last"
        );
        let e = check_bytes(&archive(&[("a/data.pkl", b"one"), ("A/DATA.pkl", b"two")])).unwrap_err();
        assert!(e.starts_with("entry A/DATA.pkl appears twice as a/data.pkl (entries 1 and 2"), "{e}");
    }

    #[test]
    fn a_local_header_that_disagrees_with_the_central_directory_is_refused() {
        let good = archive(&[("a/data.pkl", b"pickle"), ("a/data/0", &[7; 8])]);
        let local = find(&good, b"a/data/0") - LOCAL_LEN as usize;
        let cases: [(usize, &[u8], &str); 5] = [
            (local + 30 + 7, b"1", "on its name (local name a/data/1)"),
            (local + 8, &[8, 0], "on its compression method (8, 0)"),
            (local + 14, &[1, 2, 3, 4], "on its CRC (04030201, "),
            (local + 18, &[9, 0, 0, 0], "on its sizes (9 and 8 bytes, 8 and 8)"),
            (local + 6, &[8, 0], "on whether a data descriptor follows its data"),
        ];
        for (at, bytes, want) in cases {
            let mut bad = good.clone();
            bad[at..at + bytes.len()].copy_from_slice(bytes);
            let e = check_bytes(&bad).unwrap_err();
            assert!(
                e.starts_with("entry a/data/0: its local header disagrees with its central directory entry ") && e.contains(want),
                "{e}"
            );
        }
        // The central directory pointing elsewhere than a local header.
        let mut bad = good.clone();
        let central = find(&bad, &(CENTRAL_SIG as u32).to_le_bytes());
        let second = central + 1 + find(&bad[central + 1..], &(CENTRAL_SIG as u32).to_le_bytes());
        set32(&mut bad, second + 42, local as u32 + 1);
        assert!(check_bytes(&bad).unwrap_err().starts_with(&format!("entry a/data/0: no local header starts at byte {}", local + 1)));
        set32(&mut bad, second + 42, 1 << 30);
        assert!(check_bytes(&bad).unwrap_err().contains("lies past the end of the file"));
    }

    #[test]
    fn a_data_descriptor_must_agree_too() {
        let mut bad = fixture("code.pt");
        // code/data.pkl: 272 bytes of data after a 30 + 13 + 21-byte local header.
        let descriptor = 30 + 13 + 21 + 272;
        assert_eq!(&bad[descriptor..descriptor + 4], &(DESCRIPTOR_SIG as u32).to_le_bytes());
        bad[descriptor + 4] ^= 1;
        let e = check_bytes(&bad).unwrap_err();
        assert!(e.starts_with("entry code/data.pkl: its data descriptor (CRC a44daee1, 272 and 272 bytes) disagrees"), "{e}");
    }

    #[test]
    fn bytes_no_record_claims_are_refused() {
        let good = archive(&[("a/data.pkl", b"pickle"), ("a/data/0", &[7; 8])]);
        let second = find(&good, b"a/data/0") - LOCAL_LEN as usize;
        let central = find(&good, &(CENTRAL_SIG as u32).to_le_bytes());
        // Bytes between two entries: the central directory's later offsets shifted past them.
        let mut gap = good[..second].to_vec();
        gap.extend_from_slice(b"JUNK");
        gap.extend_from_slice(&good[second..]);
        let central_at = central + 4;
        let second_entry = central_at + find(&gap[central_at + 1..], &(CENTRAL_SIG as u32).to_le_bytes()) + 1;
        set32(&mut gap, second_entry + 42, second as u32 + 4);
        let end = gap.len() - END_LEN;
        set32(&mut gap, end + 16, central_at as u32);
        let e = check_bytes(&gap).unwrap_err();
        assert_eq!(e, format!("bytes {second} to {} after entry a/data.pkl, before entry a/data/0, belong to no entry", second + 4));
        // Bytes after the last entry, before the central directory.
        let mut before = good[..central].to_vec();
        before.extend_from_slice(b"JUNK");
        before.extend_from_slice(&good[central..]);
        let end = before.len() - END_LEN;
        set32(&mut before, end + 16, central as u32 + 4);
        let e = check_bytes(&before).unwrap_err();
        assert_eq!(e, format!("bytes {central} to {} after entry a/data/0, before its central directory, belong to no entry", central + 4));
        // Bytes after the end record, or between the central directory and it.
        let mut after = good.clone();
        after.extend_from_slice(b"JUNK");
        assert_eq!(check_bytes(&after).unwrap_err(), "bytes follow its end-of-central-directory record that no record claims");
        let mut inside = good[..good.len() - END_LEN].to_vec();
        inside.extend_from_slice(b"JUNK");
        inside.extend_from_slice(&good[good.len() - END_LEN..]);
        assert!(check_bytes(&inside).unwrap_err().contains("does not end where its end records start"));
        // Two central directory entries on one local header.
        let mut twice = good.clone();
        let second_entry = central + 1 + find(&good[central + 1..], &(CENTRAL_SIG as u32).to_le_bytes());
        twice[second_entry + 46..second_entry + 46 + 8].copy_from_slice(b"a/data.p");
        set32(&mut twice, second_entry + 42, 0);
        assert!(check_bytes(&twice).unwrap_err().starts_with("entry a/data.p: its local header disagrees"));
        // An entry forged inside another's data, its central directory entry pointing there.
        let inner = archive(&[("b", b"data")]);
        let forged = &inner[..find(&inner, &(CENTRAL_SIG as u32).to_le_bytes())];
        let mut overlap = archive(&[("x", forged), ("b", b"data")]);
        let central = find(&overlap, &(CENTRAL_SIG as u32).to_le_bytes());
        let b_entry = central + 1 + find(&overlap[central + 1..], &(CENTRAL_SIG as u32).to_le_bytes());
        set32(&mut overlap, b_entry + 42, LOCAL_LEN as u32 + 1);
        assert!(check_bytes(&overlap).unwrap_err().starts_with("entry b (byte 31) overlaps entry x"), "{:?}", check_bytes(&overlap));
        // Not an archive at all, or cut short.
        assert_eq!(check_bytes(b"PK\x03\x04 not really").unwrap_err(), "no end-of-central-directory record");
        assert!(check_bytes(&good[..good.len() - 1]).is_err());
    }
}
