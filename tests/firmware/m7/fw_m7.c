// fw_port.h bare-metal on qemu's mps2-an500 (Cortex-M7): ARM semihosting for the text and the exit status, an
// MPU guard under the stack, the faults reported by name. startup_m7.S calls fw_start after the FPU is enabled,
// .data copied, .bss zeroed and the stack painted; mps2_an500.ld places everything.
//
// Semihosting (ARM's "Semihosting for AArch32 and AArch64", v2): BKPT 0xAB with the operation in r0 and its
// argument in r1, which qemu serves when started with -semihosting. SYS_WRITE0 writes a string to qemu's
// stdout; SYS_EXIT_EXTENDED (ADP_Stopped_ApplicationExit, status) makes qemu exit with that status (the
// AArch32 SYS_EXIT has no status). A program run without -semihosting faults at its first BKPT.
#include <stdint.h>

#include "fw_port.h"

int main(void);
void fw_start(void);
void fw_fault(uint32_t ipsr, const uint32_t* sp);

// ---- Semihosting -------------------------------------------------------------------------------------------------

enum {
  SYS_WRITE0 = 0x04,
  SYS_EXIT_EXTENDED = 0x20,
  ADP_STOPPED_APPLICATION_EXIT = 0x20026,
};

static uint32_t semihost(uint32_t op, const void* arg) {
  register uint32_t r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void fw_puts(const char* s) { (void)semihost(SYS_WRITE0, s); }

static void fw_exit(int status) __attribute__((noreturn));
static void fw_exit(int status) {
  const uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)status};
  for (;;) {
    (void)semihost(SYS_EXIT_EXTENDED, block);
  }
}

const char* fw_platform(void) { return "cortex-m7 (qemu mps2-an500)"; }

// ---- The stack: painted at reset, measured by its deepest overwritten word -----------------------------------------

#define FW_STACK_PAINT 0x5AC3A5C3u  // startup_m7.S paints with the same word

extern uint32_t __stack_bottom[], __stack_top[];

// The guard: the 64 KiB under the stack, which starts the RAM at 0x20000000 (mps2_an500.ld). Nothing is mapped
// there, so it costs no memory; a frame of up to 64 KiB that overflows the stack lands in it.
#define FW_GUARD_BYTES 0x10000u
#define FW_GUARD_BASE ((uint32_t)(uintptr_t)__stack_bottom - FW_GUARD_BYTES)

size_t fw_stack_size(void) { return (size_t)((uintptr_t)__stack_top - (uintptr_t)__stack_bottom); }

size_t fw_stack_used(void) {
  const volatile uint32_t* w = __stack_bottom;
  while (w < __stack_top && *w == FW_STACK_PAINT) {
    w++;
  }
  return (size_t)((uintptr_t)__stack_top - (uintptr_t)w);
}

// ---- System control registers (ARMv7-M Architecture Reference Manual, B3.2 and B3.5) ------------------------------

#define REG(addr) (*(volatile uint32_t*)(addr))
#define SCB_CCR REG(0xE000ED14u)    // configuration and control
#define SCB_SHCSR REG(0xE000ED24u)  // system handler control and state
#define SCB_CFSR REG(0xE000ED28u)   // configurable fault status (MMFSR | BFSR << 8 | UFSR << 16)
#define SCB_HFSR REG(0xE000ED2Cu)   // hard fault status
#define SCB_MMFAR REG(0xE000ED34u)  // memory manage fault address
#define SCB_BFAR REG(0xE000ED38u)   // bus fault address
#define MPU_CTRL REG(0xE000ED94u)
#define MPU_RNR REG(0xE000ED98u)
#define MPU_RBAR REG(0xE000ED9Cu)
#define MPU_RASR REG(0xE000EDA0u)

// MPU region 0: the guard, no access even privileged (AP 000), never executable; the rest of the memory map
// keeps its default attributes (PRIVDEFENA).
static void guard_stack(void) {
  MPU_RNR = 0u;
  MPU_RBAR = FW_GUARD_BASE;                                    // aligned to its size, as a region must be
  MPU_RASR = (1u << 28) | (0u << 24) | (15u << 1) | 1u;        // XN, AP none, SIZE 2^(15+1) = 64 KiB, enabled
  MPU_CTRL = (1u << 2) | 1u;                                   // PRIVDEFENA | ENABLE
  __asm__ volatile("dsb\n\tisb" ::: "memory");
}

void fw_start(void) {
  SCB_SHCSR |= (1u << 16) | (1u << 17) | (1u << 18);  // MemManage, BusFault and UsageFault reported as such
  SCB_CCR |= 1u << 4;                                  // DIV_0_TRP: an integer division by zero faults
  guard_stack();
  fw_exit(main());
}

// ---- Faults --------------------------------------------------------------------------------------------------------

static void put_hex(char* out, uint32_t v) {
  for (int i = 7; i >= 0; i--) {
    out[i] = "0123456789abcdef"[v & 15u];
    v >>= 4;
  }
}

// Reports the fault on one line and exits with 128 + the exception number (a carve_status is below 128). The
// exception frame's pc is printed only when the frame lies inside the stack (a stacking error leaves none).
void fw_fault(uint32_t ipsr, const uint32_t* sp) {
  static const char* const names[16] = {"?", "reset", "NMI", "HardFault", "MemManage", "BusFault", "UsageFault", "?",
                                        "?", "?", "?", "SVCall", "DebugMonitor", "?", "PendSV", "SysTick"};
  const uint32_t exc = ipsr & 0x1FFu;
  const uint32_t cfsr = SCB_CFSR;
  const int stacking = (cfsr & ((1u << 4) | (1u << 12))) != 0;  // MSTKERR, STKERR: the frame could not be pushed
  const uint32_t addr = (cfsr & (1u << 7)) ? SCB_MMFAR : (cfsr & (1u << 15)) ? SCB_BFAR : 0u;
  const int in_guard = addr >= FW_GUARD_BASE && addr < (uint32_t)(uintptr_t)__stack_bottom;
  char msg[160] = "fault ";
  char* p = msg + 6;
  for (const char* n = names[exc < 16u ? exc : 0u]; *n != '\0'; n++) {
    *p++ = *n;
  }
  const char* fields[4] = {" cfsr 0x", " hfsr 0x", " addr 0x", " pc 0x"};
  const int have_pc = !stacking && sp >= __stack_bottom && sp + 8 <= __stack_top;
  const uint32_t values[4] = {cfsr, SCB_HFSR, addr, have_pc ? sp[6] : 0u};
  for (int f = 0; f < (have_pc ? 4 : 3); f++) {
    for (const char* n = fields[f]; *n != '\0'; n++) {
      *p++ = *n;
    }
    put_hex(p, values[f]);
    p += 8;
  }
  const char* why = (stacking || in_guard) ? " (stack overflow: raise STACK_SIZE)\n" : "\n";
  while (*why != '\0') {
    *p++ = *why++;
  }
  *p = '\0';
  fw_puts(msg);
  fw_exit(128 + (int)exc);
}
