;;; dap-mode-driver.el --- drive tensor-dap through dap-mode in `emacs --batch'  -*- lexical-binding: t -*-

;; Run by tests/editors/test_emacs_dap_mode.py:
;;   emacs --batch -Q -l dap-mode-driver.el
;; Environment: TENSOR_DAP_SCRIPT (the Python file to debug), TENSOR_DAP_PYTHON (the interpreter
;; with tensor-dap; `tensor-dap-python'), TENSOR_DAP_VARIABLE (a local to read when stopped),
;; TENSOR_DAP_DEADLINE (seconds per wait, default 60).
;; It loads the user-facing tensor-dap-dap-mode.el, opens the script, runs
;; `dap-debug' on the "tensor-dap: current file" template exactly as M-x dap-debug would, pumps
;; process output until `dap-stopped-hook' fires, reads the stop through dap-mode's own
;; `dap-request' (stackTrace, exceptionInfo, scopes, variables), continues with `dap-continue'
;; and waits for `dap-terminated-hook'.  Each finding is one stdout line
;;   TENSOR-DAP-EMACS {json}
;; Exit 0 when the session stopped and terminated; on a failure or a deadline, the *Messages*
;; buffer (with dap-mode's DAP log, `dap-print-io'), the adapter's stderr and the session's
;; output buffer go to stdout, and Emacs exits 1.

;;; Code:

(require 'package)
(require 'json)
(require 'subr-x)
;; -Q skips Debian's site-start, which makes the elpa-* packages available
(setq package-directory-list '("/usr/share/emacs/site-lisp/elpa"))
(package-initialize)

(defvar tensor-dap-driver--dir (file-name-directory (or load-file-name buffer-file-name)))
(load (expand-file-name "tensor-dap-dap-mode.el" tensor-dap-driver--dir) nil t)

(setq tensor-dap-python (or (getenv "TENSOR_DAP_PYTHON") tensor-dap-python))
(setq dap-print-io t)        ; every DAP message into *Messages* (not echoed: `dap-inhibit-io')
(setq dap-breakpoints-file (make-temp-file "tensor-dap-emacs-breakpoints"))
(setq make-backup-files nil)

(defvar tensor-dap-driver--deadline
  (string-to-number (or (getenv "TENSOR_DAP_DEADLINE") "60")))
(defvar tensor-dap-driver--created nil)
(defvar tensor-dap-driver--stopped nil "(SESSION . THREAD-ID) once `dap-stopped-hook' ran.")
(defvar tensor-dap-driver--terminated nil)

(add-hook 'dap-session-created-hook
          (lambda (session) (setq tensor-dap-driver--created session)))
(add-hook 'dap-stopped-hook
          (lambda (session)
            (unless tensor-dap-driver--stopped
              (setq tensor-dap-driver--stopped
                    (cons session (dap--debug-session-thread-id session))))))
(add-hook 'dap-terminated-hook
          (lambda (session) (setq tensor-dap-driver--terminated session)))

(defun tensor-dap-driver--emit (&rest plist)
  "Print PLIST as one machine-readable line."
  (princ (concat "TENSOR-DAP-EMACS " (json-encode plist) "\n")))

(defun tensor-dap-driver--dump-buffer (name)
  (when-let ((buffer (get-buffer name)))
    (princ (format "\n----- %s -----\n%s\n" name
                   (with-current-buffer buffer (buffer-string))))))

(defun tensor-dap-driver--fail (why)
  "Print WHY and every log buffer, then exit 1."
  (tensor-dap-driver--emit :error why)
  (dolist (buffer (buffer-list))
    (let ((name (buffer-name buffer)))
      (when (or (string= name "*Messages*") (string-match-p "stderr\\*\\| out\\*\\|log\\*" name))
        (tensor-dap-driver--dump-buffer name))))
  (kill-emacs 1))

(defun tensor-dap-driver--wait (what predicate)
  "Pump process output until PREDICATE holds; fail naming WHAT after the deadline."
  (let ((until (+ (float-time) tensor-dap-driver--deadline)))
    (while (not (funcall predicate))
      (when (> (float-time) until)
        (tensor-dap-driver--fail (format "no %s within %s s" what tensor-dap-driver--deadline)))
      (accept-process-output nil 0.1))))

(defun tensor-dap-driver--run ()
  (let* ((script (or (getenv "TENSOR_DAP_SCRIPT") (error "TENSOR_DAP_SCRIPT is not set")))
         (wanted (or (getenv "TENSOR_DAP_VARIABLE") "y"))
         (template (cdr (assoc "tensor-dap: current file" dap-debug-template-configurations))))
    (find-file script)                  ; "${file}" is the current buffer's file
    (dap-debug (copy-tree template))
    (tensor-dap-driver--wait "session" (lambda () tensor-dap-driver--created))
    (tensor-dap-driver--emit :event "session-created"
                             :adapter (process-command
                                       (dap--debug-session-proc tensor-dap-driver--created)))
    (tensor-dap-driver--wait "stop" (lambda () (or tensor-dap-driver--stopped
                                                   tensor-dap-driver--terminated)))
    (unless tensor-dap-driver--stopped
      (tensor-dap-driver--fail "the session terminated without stopping"))
    (let* ((session (car tensor-dap-driver--stopped))
           (thread-id (cdr tensor-dap-driver--stopped))
           (reason (gethash thread-id (dap--debug-session-thread-states session)))
           (frames (gethash "stackFrames"
                            (dap-request session "stackTrace" :threadId thread-id)))
           (top (car frames))
           (info (dap-request session "exceptionInfo" :threadId thread-id))
           (scopes (gethash "scopes" (dap-request session "scopes" :frameId (gethash "id" top))))
           (variables (gethash "variables"
                               (dap-request session "variables" :variablesReference
                                            (gethash "variablesReference" (car scopes)))))
           (variable (seq-find (lambda (v) (equal (gethash "name" v) wanted)) variables)))
      (tensor-dap-driver--emit :event "stopped" :reason reason :threadId thread-id)
      (tensor-dap-driver--emit :event "frame"
                               :path (gethash "path" (gethash "source" top))
                               :line (gethash "line" top)
                               :name (gethash "name" top))
      (tensor-dap-driver--emit :event "exceptionInfo"
                               :exceptionId (gethash "exceptionId" info)
                               :description (gethash "description" info)
                               :breakMode (gethash "breakMode" info))
      (tensor-dap-driver--emit :event "variable" :name wanted
                               :value (and variable (gethash "value" variable))
                               :type (and variable (gethash "type" variable)))
      ;; what dap-mode itself showed the user for the exception stop (its own exceptionInfo)
      (tensor-dap-driver--wait "dap-mode's exception message"
                               (lambda () (with-current-buffer "*Messages*"
                                            (save-excursion
                                              (goto-char (point-min))
                                              (search-forward "Exception has occurred:" nil t)))))
      (tensor-dap-driver--emit
       :event "shown"
       :text (with-current-buffer "*Messages*"
               (goto-char (point-min))
               (search-forward "Exception has occurred:")
               (buffer-substring-no-properties (match-beginning 0) (line-end-position 2))))
      (dap-continue session thread-id)
      (tensor-dap-driver--wait "termination" (lambda () tensor-dap-driver--terminated))
      (let ((proc (dap--debug-session-proc session)))
        (tensor-dap-driver--wait "adapter exit" (lambda () (not (process-live-p proc))))
        (tensor-dap-driver--emit :event "terminated"
                                 :state (symbol-name (dap--debug-session-state session))
                                 :adapterStatus (symbol-name (process-status proc))))))
  (kill-emacs 0))

(condition-case err
    (tensor-dap-driver--run)
  (error (tensor-dap-driver--fail (format "Lisp error: %S" err))))

;;; dap-mode-driver.el ends here
