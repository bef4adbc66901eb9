/* embed.S - the prelude and the bundled TypeScript stripper, in .rodata. */
    .section .rodata
    .balign 16
    .global jsw_prelude_js
    .global jsw_prelude_js_end
jsw_prelude_js:
    .incbin PRELUDE_JS
jsw_prelude_js_end:
    .byte 0
    .balign 16
    .global jsw_strip_js
    .global jsw_strip_js_end
jsw_strip_js:
    .incbin STRIP_JS
jsw_strip_js_end:
    .byte 0
    .section .note.GNU-stack,"",%progbits
