//! The checks a plugin file passes before the dynamic linker maps it.
//!
//! `dlopen` maps each loadable segment of an ELF file over the file's pages. A segment that
//! reaches past the end of the file (a copy cut short by a full disk or an interrupted `cp`)
//! maps without complaint, and the process dies of SIGBUS when it first touches a page the
//! file does not have: no error, no log line, every request in flight lost. So the headers are
//! read first, with plain reads (never a mapping, which would fault the same way), and a file
//! whose program headers, section header table or sections do not lie inside it is refused.
//! The section headers sit at the end of a linked library, so a file cut anywhere loses them
//! and is refused even when every segment happens to survive the cut.

/// What is wrong with a file's ELF structure. `NotElf` is a file that is no ELF at all (for
/// the loader: not a plugin); `Damaged` one whose headers promise more than it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElfProblem {
    NotElf(String),
    Damaged(String),
}

/// Reads `buf.len()` bytes at `offset`; an error (a short read included) is a failed check.
pub trait ReadAt {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

impl ReadAt for [u8] {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let start = usize::try_from(offset).ok().filter(|&s| s <= self.len());
        match start.and_then(|s| self.get(s..s.checked_add(buf.len())?)) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(std::io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

#[cfg(unix)]
impl ReadAt for std::fs::File {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

const PT_LOAD: u32 = 1;
const SHT_NULL: u32 = 0;
const SHT_NOBITS: u32 = 8;
const ET_DYN: u16 = 3;
/// Far more than any real library has; bounds the headers read from a hostile file.
const MAX_HEADERS: u64 = 1 << 16;

/// The ELF machine (`e_machine`) of the architecture this host was built for; `None` where
/// it is not listed here, and then not checked.
const THIS_MACHINE: Option<u16> = if cfg!(target_arch = "x86_64") {
    Some(62)
} else if cfg!(target_arch = "aarch64") {
    Some(183)
} else if cfg!(target_arch = "x86") {
    Some(3)
} else if cfg!(target_arch = "arm") {
    Some(40)
} else if cfg!(target_arch = "riscv64") {
    Some(243)
} else if cfg!(target_arch = "powerpc64") {
    Some(21)
} else if cfg!(target_arch = "s390x") {
    Some(22)
} else if cfg!(target_arch = "loongarch64") {
    Some(258)
} else {
    None
};

/// An ELF machine in words: the name of the common ones, the number of any other.
fn machine_name(machine: u16) -> String {
    let name = match machine {
        3 => "x86 (32-bit)",
        8 => "MIPS",
        20 => "PowerPC",
        21 => "PowerPC 64",
        22 => "s390x",
        40 => "ARM (32-bit)",
        62 => "x86-64",
        183 => "AArch64 (arm64)",
        243 => "RISC-V",
        258 => "LoongArch",
        other => return format!("machine {other}"),
    };
    format!("{name} (machine {machine})")
}

/// The field widths and byte order the file declares.
#[derive(Clone, Copy)]
struct Layout {
    wide: bool,
    little: bool,
}

impl Layout {
    fn u16(self, b: &[u8], at: usize) -> u64 {
        let v = [b[at], b[at + 1]];
        u64::from(if self.little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        })
    }
    fn u32(self, b: &[u8], at: usize) -> u64 {
        let v: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
        u64::from(if self.little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        })
    }
    fn u64(self, b: &[u8], at: usize) -> u64 {
        let v: [u8; 8] = b[at..at + 8].try_into().expect("8 bytes");
        if self.little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    }
    /// An address-sized field: 8 bytes in ELF64, 4 in ELF32.
    fn word(self, b: &[u8], at: usize) -> u64 {
        if self.wide {
            self.u64(b, at)
        } else {
            self.u32(b, at)
        }
    }
}

/// Checks that `file` (of `len` bytes) is a shared library of this machine's word size, byte
/// order and architecture whose program headers, segments, section header table and sections all lie
/// within its `len` bytes.
pub fn check(file: &(impl ReadAt + ?Sized), len: u64) -> Result<(), ElfProblem> {
    fn damaged<T>(what: String, len: u64) -> Result<T, ElfProblem> {
        Err(ElfProblem::Damaged(format!(
            "{what}, but the file has {len} bytes (cut short: an interrupted copy or a full disk?)"
        )))
    }
    let mut ident = [0u8; 16];
    if len < 16 || file.read_at(0, &mut ident).is_err() || &ident[..4] != b"\x7fELF" {
        return Err(ElfProblem::NotElf("it is not an ELF file".into()));
    }
    let wide = match ident[4] {
        1 => false,
        2 => true,
        other => return Err(ElfProblem::NotElf(format!("unknown ELF class {other}"))),
    };
    let little = match ident[5] {
        1 => true,
        2 => false,
        other => {
            return Err(ElfProblem::NotElf(format!(
                "unknown ELF byte order {other}"
            )))
        }
    };
    if wide != cfg!(target_pointer_width = "64") || little != cfg!(target_endian = "little") {
        return Err(ElfProblem::NotElf(format!(
            "it is a {}-bit {}-endian ELF file, built for another kind of machine",
            if wide { 64 } else { 32 },
            if little { "little" } else { "big" }
        )));
    }
    let l = Layout { wide, little };
    let header_len: u64 = if wide { 64 } else { 52 };
    if len < header_len {
        return damaged(format!("its ELF header needs {header_len} bytes"), len);
    }
    let mut h = vec![0u8; header_len as usize];
    file.read_at(0, &mut h)
        .map_err(|e| ElfProblem::Damaged(format!("cannot read its ELF header: {e}")))?;
    let e_type = l.u16(&h, 16) as u16;
    if e_type != ET_DYN {
        return Err(ElfProblem::NotElf(format!(
            "it is an ELF file of type {e_type}, not a shared library"
        )));
    }
    // Word size and byte order agree on many architectures (x86-64 and AArch64 both), and
    // the dynamic linker refuses a library of another one with "No such file or directory".
    let e_machine = l.u16(&h, 18) as u16;
    if let Some(this) = THIS_MACHINE.filter(|&m| m != e_machine) {
        return Err(ElfProblem::NotElf(format!(
            "it is an ELF file for {}, built for another kind of machine (this one is {})",
            machine_name(e_machine),
            machine_name(this)
        )));
    }
    let (phoff, shoff, rest) = if wide {
        (l.u64(&h, 32), l.u64(&h, 40), 52)
    } else {
        (l.u32(&h, 28), l.u32(&h, 32), 40)
    };
    let phentsize = l.u16(&h, rest + 2);
    let phnum = l.u16(&h, rest + 4);
    let shentsize = l.u16(&h, rest + 6);
    let mut shnum = l.u16(&h, rest + 8);
    let shstrndx = l.u16(&h, rest + 10);

    // Program headers: every one inside the file, and so is every segment's file part.
    let (ph_min, sh_min) = if wide { (56, 64) } else { (32, 40) };
    if phnum == 0 {
        return Err(ElfProblem::NotElf("it has no program headers".into()));
    }
    if phentsize < ph_min || phnum > MAX_HEADERS {
        return Err(ElfProblem::Damaged(format!(
            "its program header table is malformed ({phnum} entries of {phentsize} bytes)"
        )));
    }
    let table = |what: &str, off: u64, n: u64, size: u64| -> Result<Vec<u8>, ElfProblem> {
        let end = n.saturating_mul(size).saturating_add(off);
        if end > len {
            return damaged(
                format!(
                    "its {what} ({n} entries of {size} bytes at byte {off}) ends at byte {end}"
                ),
                len,
            );
        }
        let mut buf = vec![0u8; (end - off) as usize];
        file.read_at(off, &mut buf)
            .map_err(|e| ElfProblem::Damaged(format!("cannot read its {what}: {e}")))?;
        Ok(buf)
    };
    let phdrs = table("program header table", phoff, phnum, phentsize)?;
    let mut loadable = 0;
    for (i, ph) in phdrs.chunks_exact(phentsize as usize).enumerate() {
        let p_type = l.u32(ph, 0) as u32;
        let (offset, filesz, memsz) = if wide {
            (l.u64(ph, 8), l.u64(ph, 32), l.u64(ph, 40))
        } else {
            (l.word(ph, 4), l.word(ph, 16), l.word(ph, 20))
        };
        let what = if p_type == PT_LOAD {
            loadable += 1;
            "loadable segment"
        } else {
            "segment"
        };
        match offset.checked_add(filesz) {
            Some(end) if end <= len => {}
            _ => {
                return damaged(
                    format!(
                        "its {what} {i} ({filesz} bytes at byte {offset}) reaches byte {}",
                        offset.saturating_add(filesz)
                    ),
                    len,
                )
            }
        }
        if p_type == PT_LOAD && filesz > memsz {
            return Err(ElfProblem::Damaged(format!(
                "its loadable segment {i} holds {filesz} bytes of file in {memsz} bytes of memory"
            )));
        }
    }
    if loadable == 0 {
        return Err(ElfProblem::NotElf("it has no loadable segment".into()));
    }

    // Section headers: optional (a stripped-down library may have none), but when the header
    // names a table, the table and every section with bytes in the file must be inside it.
    if shoff == 0 {
        return Ok(());
    }
    if shentsize < sh_min {
        return Err(ElfProblem::Damaged(format!(
            "its section header entries are {shentsize} bytes, fewer than ELF's {sh_min}"
        )));
    }
    if shnum == 0 {
        // More than 0xff00 sections: the count is in section 0's size.
        let first = table("section header table", shoff, 1, shentsize)?;
        shnum = l.word(&first, if wide { 32 } else { 20 });
    }
    if shnum > MAX_HEADERS {
        return Err(ElfProblem::Damaged(format!(
            "its section header table claims {shnum} sections"
        )));
    }
    let shdrs = table("section header table", shoff, shnum, shentsize)?;
    // 0 is "none" and 0xffff (SHN_XINDEX) puts the index in section 0; any other must exist.
    if shstrndx != 0 && shstrndx != 0xffff && shstrndx >= shnum {
        return Err(ElfProblem::Damaged(format!(
            "its section name table is section {shstrndx} of {shnum}"
        )));
    }
    for (i, sh) in shdrs.chunks_exact(shentsize as usize).enumerate() {
        let sh_type = l.u32(sh, 4) as u32;
        if sh_type == SHT_NULL || sh_type == SHT_NOBITS {
            continue;
        }
        let (offset, size) = if wide {
            (l.u64(sh, 24), l.u64(sh, 32))
        } else {
            (l.u32(sh, 16), l.u32(sh, 20))
        };
        match offset.checked_add(size) {
            Some(end) if end <= len => {}
            _ => {
                return damaged(
                    format!(
                        "its section {i} ({size} bytes at byte {offset}) reaches byte {}",
                        offset.saturating_add(size)
                    ),
                    len,
                )
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host binary's own libc is a real shared library of this machine.
    fn real_library() -> Vec<u8> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let path = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("libc.so") || p.contains("libc-"))
            .expect("libc is mapped");
        std::fs::read(path).unwrap()
    }

    #[cfg(all(
        target_os = "linux",
        target_pointer_width = "64",
        target_endian = "little"
    ))]
    #[test]
    fn a_whole_library_passes_and_every_cut_is_refused() {
        let bytes = real_library();
        assert_eq!(check(&bytes[..], bytes.len() as u64), Ok(()));
        // Cut at many points, from the header to one byte short: none passes.
        let len = bytes.len();
        for cut in [
            1,
            15,
            16,
            40,
            63,
            64,
            200,
            4096,
            len / 10,
            len / 2,
            len * 9 / 10,
            len - 1,
        ] {
            let short = &bytes[..cut];
            let problem = check(short, cut as u64).expect_err(&format!("cut at {cut} passed"));
            if cut >= 64 {
                let ElfProblem::Damaged(text) = &problem else {
                    panic!("cut at {cut}: {problem:?}");
                };
                assert!(
                    text.contains(&format!("the file has {cut} bytes")),
                    "{text}"
                );
            }
        }
        // A file that reads shorter than it says (the length is the caller's): refused.
        let problem = check(&bytes[..len / 2], len as u64).unwrap_err();
        assert!(matches!(problem, ElfProblem::Damaged(_)), "{problem:?}");
    }

    #[cfg(all(
        target_os = "linux",
        target_pointer_width = "64",
        target_endian = "little"
    ))]
    #[test]
    fn a_segment_past_the_end_is_named_even_with_the_section_headers_gone() {
        let mut bytes = real_library();
        // No section header table, as some stripped libraries ship: the segments decide.
        bytes[40..48].copy_from_slice(&0u64.to_le_bytes());
        bytes[60..62].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(check(&bytes[..], bytes.len() as u64), Ok(()));
        let phoff = u64::from_le_bytes(bytes[32..40].try_into().unwrap()) as usize;
        let phnum = u16::from_le_bytes(bytes[56..58].try_into().unwrap()) as usize;
        let last_load_end = (0..phnum)
            .map(|i| &bytes[phoff + i * 56..phoff + (i + 1) * 56])
            .filter(|ph| u32::from_le_bytes(ph[0..4].try_into().unwrap()) == PT_LOAD)
            .map(|ph| {
                u64::from_le_bytes(ph[8..16].try_into().unwrap())
                    + u64::from_le_bytes(ph[32..40].try_into().unwrap())
            })
            .max()
            .unwrap() as usize;
        let cut = last_load_end - 1;
        let ElfProblem::Damaged(text) = check(&bytes[..cut], cut as u64).unwrap_err() else {
            panic!("not damaged");
        };
        assert!(
            text.contains("loadable segment")
                && text.contains(&format!("reaches byte {last_load_end}")),
            "{text}"
        );
    }

    #[test]
    fn what_is_no_shared_library_is_said_so() {
        let not_elf = check(&b"this is not an ELF file"[..], 23).unwrap_err();
        assert_eq!(not_elf, ElfProblem::NotElf("it is not an ELF file".into()));
        assert!(matches!(
            check(&[0u8; 0][..], 0),
            Err(ElfProblem::NotElf(_))
        ));
        // An ELF header of the other word size.
        let mut other = b"\x7fELF".to_vec();
        other.extend([
            if cfg!(target_pointer_width = "64") {
                1
            } else {
                2
            },
            1,
            1,
        ]);
        other.resize(64, 0);
        let ElfProblem::NotElf(text) = check(&other[..], 64).unwrap_err() else {
            panic!("not NotElf");
        };
        assert!(text.contains("another kind of machine"), "{text}");
    }

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn a_library_of_another_architecture_with_the_same_word_size_is_named_as_such() {
        let mut bytes = real_library();
        // AArch64: 64-bit little-endian, like this machine; only e_machine tells them apart.
        bytes[18..20].copy_from_slice(&183u16.to_le_bytes());
        let ElfProblem::NotElf(text) = check(&bytes[..], bytes.len() as u64).unwrap_err() else {
            panic!("not NotElf");
        };
        assert_eq!(
            text,
            "it is an ELF file for AArch64 (arm64) (machine 183), built for another kind of \
             machine (this one is x86-64 (machine 62))"
        );
        bytes[18..20].copy_from_slice(&4242u16.to_le_bytes());
        let ElfProblem::NotElf(text) = check(&bytes[..], bytes.len() as u64).unwrap_err() else {
            panic!("not NotElf");
        };
        assert!(
            text.contains("for machine 4242, built for another kind"),
            "{text}"
        );
    }
}
