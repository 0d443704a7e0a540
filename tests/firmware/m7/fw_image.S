// The input image of the firmware harness (tests/firmware/m7/fw_main.c): fw_image.rgb, (h, w, 3) RGB bytes that
// tests/firmware/qemu_m7.py decodes from a PNG, linked read-only (.incbin; the assembler's -I finds the file).
// '%' (not '@', a comment on 32-bit ARM) keeps it one file for x86-64 and arm-none-eabi.
        .section .rodata.fw_image, "a"
        .balign 64
        .globl fw_image
        .type fw_image, %object
fw_image:
        .incbin "fw_image.rgb"
        .globl fw_image_end
fw_image_end:
        .size fw_image, . - fw_image
        .section .note.GNU-stack, "", %progbits
