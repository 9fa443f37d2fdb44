/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rv64insns.S - RV64GC instructions (and the extensions riscv64.c also
 * decodes) and the classes riscv64.c should give them (arch.h CLS_*), for
 * rv64_classify_test.c.  Assembled with riscv64-linux-gnu-as; each
 * `insn FLAGS, instruction` (insn_classes.inc) emits the instruction and
 * its expected flags.  The 32-bit forms are assembled under
 * `.option norvc`, the compressed ones spelled c.* under `.option rvc`.  Each instruction is classified alone,
 * as a one-instruction kernel-half TB.
 */
	.include "insn_classes.inc"

	.text
	.option norvc
here:
	/* integer computation: frame only when rd is ra, sp or s0 */
	insn 0, add a0, a1, a2
	insn 0, addi a0, sp, 16
	insn F, addi sp, sp, -32
	insn F, addi s0, sp, 32
	insn F, add ra, a0, a1
	insn 0, addiw a0, a0, 1
	insn F, subw sp, sp, a0
	insn 0, lui a0, 0x12345
	insn F, lui ra, 1
	insn 0, auipc a0, 0
	insn F, auipc ra, 0
	insn 0, mul a0, a1, a2
	insn 0, divuw a0, a1, a2
	insn 0, slli a0, a0, 3
	insn 0, sltu a0, a1, a2
	insn 0, addi zero, zero, 0	/* nop */
	insn 0, sh1add a0, a1, a2	/* Zba */
	insn 0, andn a0, a1, a2		/* Zbb */
	insn 0, prefetch.r 64(a0)	/* Zicbop: ori x0, a hint, no access */
	insn 0, prefetch.w 0(sp)

	/* branches */
	insn B|C, beq a0, a1, here
	insn B|C, bne a0, zero, here
	insn B|C, blt a0, a1, here
	insn B|C, bge a0, a1, here
	insn B|C, bltu a0, a1, here
	insn B|C, bgeu a0, a1, here
	insn B|C, bne a0, a1, last	/* forward, past 2K: imm bit 11 */
	insn B, jal zero, here		/* j */
	insn B|F, jal ra, here		/* call */
	insn B, jal t0, here		/* call through the alternate link */
	insn B, jalr zero, 0(ra)	/* ret */
	insn B|I, jalr zero, 8(ra)	/* no return for valgrind */
	insn B|I, jalr zero, 0(t0)	/* jr t0: cachegrind's Bi */
	insn B|I, jalr zero, 0(a5)	/* jr: a tail call, a switch */
	insn B|I|F, jalr ra, 0(a5)	/* indirect call */
	insn B|I|F, jalr ra, 0(ra)
	insn B|I, jalr t0, 0(a5)
	insn B|I, jalr a0, 0(a1)

	/* loads and stores */
	insn M|X, lb a0, 0(a1)
	insn M|X, lh a0, -2(a1)
	insn M|X, lw a0, 4(sp)
	insn M|X, ld a0, 8(s0)
	insn M|X, lbu a0, 0(a1)
	insn M|X, lhu a0, 0(a1)
	insn M|X, lwu a0, 0(a1)
	insn M|X|F, ld ra, 8(sp)
	insn M|X|F, ld s0, 0(sp)
	insn M|X|F, ld sp, 0(a0)
	insn M|X, sb a0, 0(a1)
	insn M|X, sh a0, 0(a1)
	insn M|X, sw a0, 4(a1)
	insn M|X, sd ra, 8(sp)		/* stores write no register */
	insn M|X, sd s0, 0(sp)
	insn M|X, flw fa0, 0(a0)
	insn M|X, fld fa0, 8(sp)
	insn M|X, fsw fa0, 0(a0)
	insn M|X, fsd fs0, 8(sp)
	insn M|X, flq fa0, 0(a0)
	insn M|X, fsq fa0, 0(a0)

	/* atomics */
	insn M|X, lr.w a0, (a1)
	insn M|X, lr.d.aqrl a0, (a1)
	insn M|X, sc.w a2, a0, (a1)
	insn M|X, sc.d.rl a2, a0, (a1)
	insn M|X, amoswap.w a0, a1, (a2)
	insn M|X, amoadd.d.aq a0, a1, (a2)
	insn M|X, amoand.w a0, a1, (a2)
	insn M|X, amoor.d a0, a1, (a2)
	insn M|X, amoxor.w a0, a1, (a2)
	insn M|X, amomax.d a0, a1, (a2)
	insn M|X, amominu.w zero, a1, (a2)
	insn M|X|F, amoadd.d ra, a1, (a2)

	/* floating point: no memory, integer results may be frame registers */
	insn 0, fadd.d fa0, fa1, fa2
	insn 0, fmadd.s fa0, fa1, fa2, fa3
	insn 0, fnmsub.d fa0, fa1, fa2, fa3
	insn 0, fcvt.d.l fa0, a0
	insn 0, fcvt.l.d a0, fa0
	insn F, fcvt.w.d s0, fa0
	insn 0, fmv.x.d a0, fa0
	insn F, fmv.x.d sp, fa0
	insn 0, fmv.d.x fa0, a0
	insn 0, feq.d a0, fa0, fa1
	insn 0, fclass.d a0, fa0
	insn 0, fsgnj.d fa0, fa1, fa1

	/* fences and cache-block operations */
	insn 0, fence rw, rw
	insn 0, fence.i
	insn 0, fence.tso
	insn 0, pause
	insn X, cbo.clean 0(a0)
	insn X, cbo.flush 0(a0)
	insn X, cbo.inval 0(a0)
	insn M|X, cbo.zero 0(a0)

	/* system: traps, CSRs, the page-table write */
	insn X|F, ecall
	insn X|F, ebreak
	insn X|F, sret
	insn X|F, mret
	insn X|F, wfi
	insn X|F, sfence.vma
	insn X|F, sfence.vma a0, a1
	insn X|F, csrr a0, time
	insn X|F, csrr a0, satp		/* a read */
	insn X|F, frflags a0
	insn X|F, fsflags a0
	insn X|F, csrw sstatus, a0
	insn X|F, csrs sstatus, a0
	insn X|F, csrrs a0, satp, zero	/* a read */
	insn X|F, csrrci a0, satp, 0	/* a read */
	insn A|X|F, csrw satp, a0	/* Linux's switch_mm */
	insn A|X|F, csrrw a1, satp, a0
	insn A|X|F, csrw satp, zero
	insn A|X|F, csrs satp, a0
	insn A|X|F, csrc satp, t6
	insn A|X|F, csrwi satp, 0
	insn A|X|F, csrsi satp, 1
	insn A|X|F, csrrci a0, satp, 4
	insn M|X|F, hlv.w a0, (a1)	/* hypervisor loads and stores */
	insn M|X|F, hsv.d a0, (a1)
	insn M|X|F, hlvx.wu a0, (a1)

	/* vector: the first use traps; vector loads and stores are memory */
	insn X, vsetvli a0, a1, e32, m1, ta, ma
	insn X|F, vsetvli sp, a1, e32, m1, ta, ma
	insn X, vadd.vv v0, v1, v2
	insn X, vmv.x.s a0, v1
	insn M|X, vle32.v v0, (a0)
	insn M|X, vse8.v v0, (a0)
	insn M|X, vlse64.v v0, (a0), a1
	insn M|X, vluxei32.v v0, (a0), v4
	insn M|X, vl1re8.v v0, (a0)
	insn M|X, vs1r.v v0, (a0)

	/* compressed */
	.option rvc
near:
	insn 0, c.nop
	insn 0, c.addi a0, 1
	insn F, c.addi sp, 16
	insn F, c.addi16sp sp, -64
	insn F, c.addi4spn s0, sp, 16
	insn 0, c.addi4spn a0, sp, 16
	insn 0, c.li a0, 5
	insn F, c.li s0, 0
	insn 0, c.lui a0, 1
	insn F, c.lui ra, 1
	insn 0, c.addiw a0, 1
	insn 0, c.slli a0, 2
	insn 0, c.srli a0, 2
	insn 0, c.srai a1, 2
	insn F, c.andi s0, -16
	insn 0, c.sub a0, a1
	insn 0, c.xor a0, a1
	insn 0, c.addw a0, a1
	insn F, c.subw s0, a1
	insn 0, c.mv a0, a1
	insn F, c.mv s0, sp
	insn F, c.mv sp, s0
	insn 0, c.add a0, a1
	insn F, c.add sp, a0
	insn B, c.j near
	insn B|C, c.beqz a0, near
	insn B|C, c.bnez s1, near
	insn B|C, c.bnez a0, cend	/* forward: offset bits 5 and 4 */
	insn B|C, c.beqz a5, cend
	insn B, c.jr ra			/* ret */
	insn B|I, c.jr t0
	insn B|I, c.jr a5
	insn B|I|F, c.jalr a5
	insn B|I|F, c.jalr ra
	insn X|F, c.ebreak
	insn M|X, c.lw a0, 0(a1)
	insn M|X, c.ld a0, 8(a1)
	insn M|X|F, c.ld s0, 8(a1)
	insn M|X, c.sw a0, 4(a1)	/* the marker's compressed twin */
	insn M|X, c.sd a0, 8(a1)
	insn M|X, c.fld fa0, 8(a1)
	insn M|X, c.fsd fa0, 8(a1)
	insn M|X, c.lwsp a0, 4(sp)
	insn M|X, c.ldsp a0, 8(sp)
	insn M|X|F, c.ldsp ra, 8(sp)
	insn M|X|F, c.ldsp s0, 0(sp)
	insn M|X, c.swsp a0, 4(sp)
	insn M|X, c.sdsp ra, 8(sp)
	insn M|X, c.fldsp fa0, 8(sp)
	insn M|X, c.fsdsp fa0, 8(sp)
	insn X|F, c.unimp
cend:

	/* the marker, last (rv64_classify_test.c: user code gives it no D) */
	.option norvc
last:
	insn M|X|D, sw a0, 0(a1)
