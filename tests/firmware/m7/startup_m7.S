// Start-up of the firmware harness on qemu's mps2-an500 (Cortex-M7; tests/firmware/m7/mps2_an500.ld): the
// vector table and the reset handler, in assembly because nothing may run before the FPU is enabled (the C
// code is built -mfloat-abi=hard, and GCC may use the FPU's registers for any copy).
        .syntax unified
        .cpu cortex-m7
        .fpu fpv5-d16
        .thumb

// ---- Vector table: the initial stack pointer, then the 15 system exceptions (no interrupt is enabled) -------
        .section .vectors, "a", %progbits
        .balign 128
        .globl fw_vectors
fw_vectors:
        .word __stack_top          // initial MSP
        .word Reset_Handler
        .word Fault_Handler        // 2 NMI
        .word Fault_Handler        // 3 HardFault
        .word Fault_Handler        // 4 MemManage (the stack guard)
        .word Fault_Handler        // 5 BusFault
        .word Fault_Handler        // 6 UsageFault
        .word 0, 0, 0, 0           // 7-10 reserved
        .word Fault_Handler        // 11 SVCall
        .word Fault_Handler        // 12 DebugMonitor
        .word 0                    // 13 reserved
        .word Fault_Handler        // 14 PendSV
        .word Fault_Handler        // 15 SysTick

        .text
// ---- Reset: FPU on, .data copied, .bss zeroed, the stack painted, then C --------------------------------------
        .thumb_func
        .globl Reset_Handler
        .type Reset_Handler, %function
Reset_Handler:
        // CPACR (0xE000ED88) bits 20-23: full access to CP10 and CP11, the FPU.
        ldr r0, =0xE000ED88
        ldr r1, [r0]
        orr r1, r1, #(0xF << 20)
        str r1, [r0]
        dsb
        isb
        // .data: from its load address in SSRAM1 to RAM.
        ldr r0, =__data_load
        ldr r1, =__data_start
        ldr r2, =__data_end
1:      cmp r1, r2
        bhs 2f
        ldr r3, [r0], #4
        str r3, [r1], #4
        b 1b
        // .bss: zero (the model's buffers are static C objects).
2:      ldr r1, =__bss_start
        ldr r2, =__bss_end
        movs r3, #0
3:      cmp r1, r2
        bhs 4f
        str r3, [r1], #4
        b 3b
        // The stack: every word painted with FW_STACK_PAINT (nothing is on it yet), so that fw_stack_used()
        // finds the deepest word ever written.
4:      ldr r1, =__stack_bottom
        ldr r2, =__stack_top
        ldr r3, =0x5AC3A5C3
5:      cmp r1, r2
        bhs 6f
        str r3, [r1], #4
        b 5b
6:      bl fw_start                // never returns (semihosting SYS_EXIT_EXTENDED)
7:      b 7b
        .size Reset_Handler, . - Reset_Handler

// ---- Faults: onto a stack of their own (the main one may be what overflowed), then fw_fault(ipsr, sp) ------
        .thumb_func
        .globl Fault_Handler
        .type Fault_Handler, %function
Fault_Handler:
        mov r1, sp                 // where the exception frame was (or should have been) pushed
        ldr r0, =__fault_stack_top
        mov sp, r0
        mrs r0, ipsr               // the exception number
        b fw_fault
        .size Fault_Handler, . - Fault_Handler

        .section .note.GNU-stack, "", %progbits
