;;; tensor-dap-dap-mode.el --- tensor-dap for Emacs dap-mode  -*- lexical-binding: t -*-

;; Put this in your init file (or `load' it); it loads dap-mode.  It registers the debug type
;; "tensor-dap" with dap-mode, started as `python -m tensor_dap adapter' (DAP on stdio, in
;; front of debugpy), and a template "tensor-dap: current file".  Then, in a Python buffer:
;;   M-x dap-debug RET tensor-dap: current file RET
;; When an enabled tensor rule fires, the program stops on your line; dap-mode shows
;; "Exception has occurred: RULE" with the message naming the tensors, and dap-ui's locals
;; show tensors as tensor<(4, 1) float32 cuda:0 grad AddmmBackward0>.
;;
;; Tested by tests/editors/test_emacs_dap_mode.py (Debian's emacs-nox 28 + elpa-dap-mode 0.7).

;;; Code:

(require 'dap-mode)

(defgroup tensor-dap nil
  "tensor-dap, the PyTorch-aware debugger, in dap-mode."
  :group 'dap-mode)

(defcustom tensor-dap-python "python3"
  "Python interpreter that has tensor-dap installed; it starts the adapter.
The debuggee runs under the same interpreter unless a template sets :python."
  :type 'string
  :risky t
  :group 'tensor-dap)

(defcustom tensor-dap-rules ["device-mismatch" "grad-lost" "inplace-saved" "broadcast"
                             "missing-zero-grad"]
  "Tensor rules the templates enable (the adapter's `tensorBreakpoints').
A vector of rule ids, or [\"default\"] / [\"all\"]."
  :type 'sexp
  :group 'tensor-dap)

(defun tensor-dap--populate (conf)
  "Complete the launch configuration CONF of type \"tensor-dap\" for `dap-debug'."
  (let ((conf (copy-tree conf)))
    ;; dap-mode starts this command and speaks DAP with it over its stdin/stdout
    (setq conf (plist-put conf :dap-server-path
                          (list tensor-dap-python "-m" "tensor_dap" "adapter")))
    (when (equal (plist-get conf :request) "launch")
      (unless (plist-get conf :program)
        (setq conf (plist-put conf :program (buffer-file-name))))
      (unless (plist-get conf :cwd)
        (setq conf (plist-put conf :cwd (file-name-directory (plist-get conf :program))))))
    (unless (plist-member conf :tensorBreakpoints)
      (setq conf (plist-put conf :tensorBreakpoints tensor-dap-rules)))
    conf))

(dap-register-debug-provider "tensor-dap" #'tensor-dap--populate)

(dap-register-debug-template
 "tensor-dap: current file"
 (list :type "tensor-dap"
       :request "launch"
       :name "tensor-dap: current file"
       :program "${file}"
       :cwd "${fileDirname}"
       :console "internalConsole"
       :justMyCode t
       :tensorBreakpoints ["device-mismatch"]))

(dap-register-debug-template
 "tensor-dap: attach 127.0.0.1:5678"
 (list :type "tensor-dap"
       :request "attach"
       :name "tensor-dap: attach 127.0.0.1:5678"
       :connect (list :host "127.0.0.1" :port 5678)
       :tensorBreakpoints ["default"]))

;; dap-ui's breakpoints view (`dap-ui-breakpoints') lists one checkbox per tensor rule beside
;; debugpy's exception filters; ticks are kept in `dap-exception-breakpoints' per debug type.
;; dap-mode 0.7 sends them (setExceptionBreakpoints) only when some line breakpoint exists or
;; a box is toggled, so the rules a session starts with come from :tensorBreakpoints; once a
;; tensor box is ticked, the ticks decide.  dap-mode reads this variable even without dap-ui.
(defvar dap-exception-breakpoints nil)

(provide 'tensor-dap-dap-mode)
;;; tensor-dap-dap-mode.el ends here
