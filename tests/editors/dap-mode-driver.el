;;; dap-mode-driver.el --- drive tensor-dap through dap-mode in `emacs --batch'  -*- lexical-binding: t -*-

;; Run by tests/editors/test_emacs_dap_mode.py:
;;   emacs --batch -Q -l dap-mode-driver.el
;; Environment: TENSOR_DAP_CONFIG (the user configuration to load; default
;; tensor-dap-dap-mode.el next to this file), TENSOR_DAP_SCRIPT (the Python file to debug), TENSOR_DAP_PYTHON (the interpreter
;; with tensor-dap; `tensor-dap-python'), TENSOR_DAP_DEADLINE (seconds per wait, default 60),
;; TENSOR_DAP_TOTAL_DEADLINE (seconds for the whole run, default 150), TENSOR_DAP_TEMPLATE (the
;; template to `dap-debug', default "tensor-dap: current file"), TENSOR_DAP_PORT (the port in
;; the attach template's :connect), TENSOR_DAP_SIMULATE (the launch's :simulate, e.g. "cuda", as
;; a user without a GPU adds it to the template),
;; TENSOR_DAP_BREAK_LINE (a line breakpoint set with `dap-breakpoint-add'; the driver steps
;; over it with `dap-next'), TENSOR_DAP_TICK (rule ids, comma-separated: the launch enables no
;; rule, these boxes are ticked in `dap-exception-breakpoints', as in dap-ui's breakpoints view).
;; It loads that configuration, opens the script, runs
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
(load (or (getenv "TENSOR_DAP_CONFIG")
          (expand-file-name "tensor-dap-dap-mode.el" tensor-dap-driver--dir))
      nil t)
;; dap-ui's variable (its breakpoints view's checkboxes), read by dap-mode itself
(defvar dap-exception-breakpoints nil)

(setq tensor-dap-python (or (getenv "TENSOR_DAP_PYTHON") tensor-dap-python))
(setq dap-print-io t)        ; every DAP message into *Messages* (not echoed: `dap-inhibit-io')
(setq dap-breakpoints-file (make-temp-file "tensor-dap-emacs-breakpoints" nil nil "#s(hash-table)"))
(add-hook 'kill-emacs-hook (lambda () (ignore-errors (delete-file dap-breakpoints-file))))
(setq make-backup-files nil)

(defvar tensor-dap-driver--deadline
  (string-to-number (or (getenv "TENSOR_DAP_DEADLINE") "60")))
(defvar tensor-dap-driver--give-up
  (+ (float-time) (string-to-number (or (getenv "TENSOR_DAP_TOTAL_DEADLINE") "150")))
  "When the whole run gives up (and prints its logs), whatever it waits for.")
(defvar tensor-dap-driver--created nil)
(defvar tensor-dap-driver--stops nil
  "(SESSION . THREAD-ID) for each run of `dap-stopped-hook' not handled yet, oldest first.")
(defvar tensor-dap-driver--terminated nil)
(defvar tensor-dap-driver--shown 0 "How many of dap-mode's exception messages were reported.")

(add-hook 'dap-session-created-hook
          (lambda (session) (setq tensor-dap-driver--created session)))
(add-hook 'dap-stopped-hook
          (lambda (session)
            (setq tensor-dap-driver--stops
                  (append tensor-dap-driver--stops
                          (list (cons session (dap--debug-session-thread-id session)))))))
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
  (let ((until (min (+ (float-time) tensor-dap-driver--deadline) tensor-dap-driver--give-up)))
    (while (not (funcall predicate))
      (when (> (float-time) until)
        (tensor-dap-driver--fail
         (if (>= (float-time) tensor-dap-driver--give-up)
             (format "no %s before the run's deadline (TENSOR_DAP_TOTAL_DEADLINE)" what)
           (format "no %s within %s s" what tensor-dap-driver--deadline))))
      (accept-process-output nil 0.1))))

(defun tensor-dap-driver--report (session thread-id)
  "Report the stop of THREAD-ID in SESSION through dap-mode's `dap-request'; its reason."
  (let* ((reason (gethash thread-id (dap--debug-session-thread-states session)))
         (frames (gethash "stackFrames" (dap-request session "stackTrace" :threadId thread-id)))
         (top (car frames))
         (scopes (gethash "scopes" (dap-request session "scopes" :frameId (gethash "id" top))))
         (variables (gethash "variables"
                             (dap-request session "variables" :variablesReference
                                          (gethash "variablesReference" (car scopes))))))
    (tensor-dap-driver--emit :event "stopped" :reason reason :threadId thread-id
                             :path (gethash "path" (gethash "source" top))
                             :line (gethash "line" top)
                             :name (gethash "name" top))
    ;; the first scope's variables as VARIABLES shows them: name -> value
    (tensor-dap-driver--emit :event "variables"
                             :values (mapcar (lambda (v) (cons (gethash "name" v)
                                                               (gethash "value" v)))
                                             (seq-take variables 40)))
    (when (equal reason "exception")
      (let ((info (dap-request session "exceptionInfo" :threadId thread-id)))
        (tensor-dap-driver--emit :event "exceptionInfo"
                                 :exceptionId (gethash "exceptionId" info)
                                 :description (gethash "description" info)
                                 :breakMode (gethash "breakMode" info)))
      ;; what dap-mode itself showed the user for this stop (from its own exceptionInfo)
      (let ((shown (lambda ()
                     (with-current-buffer "*Messages*"
                       (goto-char (point-min))
                       (when (search-forward "Exception has occurred:" nil t
                                             (1+ tensor-dap-driver--shown))
                         (buffer-substring-no-properties (match-beginning 0)
                                                         (line-end-position 2)))))))
        (tensor-dap-driver--wait "dap-mode's exception message" shown)
        (tensor-dap-driver--emit :event "shown" :text (funcall shown))
        (setq tensor-dap-driver--shown (1+ tensor-dap-driver--shown))))
    reason))

(defun tensor-dap-driver--watch-data (session thread-id expression)
  "Arm a data breakpoint on EXPRESSION in the top frame of THREAD-ID, with `dap-request'."
  (let* ((top (car (gethash "stackFrames"
                            (dap-request session "stackTrace" :threadId thread-id))))
         (info (dap-request session "dataBreakpointInfo"
                            :name expression :frameId (gethash "id" top)))
         (armed (dap-request session "setDataBreakpoints"
                             :breakpoints (vector (list :dataId (gethash "dataId" info))))))
    (tensor-dap-driver--emit :event "dataBreakpoint"
                             :description (gethash "description" info)
                             :verified (gethash "verified"
                                                (elt (gethash "breakpoints" armed) 0)))))

(defun tensor-dap-driver--run ()
  (let* ((script (or (getenv "TENSOR_DAP_SCRIPT") (error "TENSOR_DAP_SCRIPT is not set")))
         (break-line (getenv "TENSOR_DAP_BREAK_LINE"))
         (ticks (getenv "TENSOR_DAP_TICK"))
         (data-watch (getenv "TENSOR_DAP_DATA_WATCH")) ; "Break on Value Change" at the breakpoint
         (data-armed nil)
         (template (copy-tree (cdr (assoc (or (getenv "TENSOR_DAP_TEMPLATE")
                                              "tensor-dap: current file")
                                          dap-debug-template-configurations)))))
    (find-file script)                  ; "${file}" is the current buffer's file
    (when-let ((port (getenv "TENSOR_DAP_PORT")))  ; the attach template, on another port
      (setq template (plist-put template :connect
                                (list :host "127.0.0.1" :port (string-to-number port)))))
    (when-let ((kind (getenv "TENSOR_DAP_SIMULATE")))  ; a CUDA script on a machine without a GPU
      (setq template (plist-put template :simulate kind)))
    (when break-line                    ; as M-x dap-breakpoint-add on that line
      (goto-char (point-min))
      (forward-line (1- (string-to-number break-line)))
      (dap-breakpoint-add))
    (when ticks
      ;; no rule from the launch: the rules are the boxes ticked in dap-ui's breakpoints view
      (setq template (plist-put template :tensorBreakpoints []))
      (setf (alist-get "tensor-dap" dap-exception-breakpoints nil nil #'equal)
            (mapcar (lambda (rule) (cons rule t)) (split-string ticks ","))))
    (dap-debug template)
    (tensor-dap-driver--wait "session" (lambda () tensor-dap-driver--created))
    (tensor-dap-driver--emit :event "session-created"
                             :adapter (process-command
                                       (dap--debug-session-proc tensor-dap-driver--created)))
    (let ((session nil) (stops 0))
      (while (not tensor-dap-driver--terminated)
        (tensor-dap-driver--wait "stop or termination"
                                 (lambda () (or tensor-dap-driver--stops
                                                tensor-dap-driver--terminated)))
        (when-let ((stop (pop tensor-dap-driver--stops)))
          (setq session (car stop) stops (1+ stops))
          (when (> stops 5)
            (tensor-dap-driver--fail "more than 5 stops"))
          ;; a line breakpoint: step over it (dap-next), or arm the data breakpoint there and
          ;; continue; any other stop: dap-continue (a data breakpoint's: removed first)
          (let ((reason (tensor-dap-driver--report session (cdr stop))))
            (cond
             ((and (equal reason "breakpoint") data-watch (not data-armed))
              (setq data-armed t)
              (tensor-dap-driver--watch-data session (cdr stop) data-watch)
              (dap-continue session (cdr stop)))
             ((equal reason "breakpoint") (dap-next session))
             (t
              (when data-armed
                (dap-request session "setDataBreakpoints" :breakpoints []))
              (dap-continue session (cdr stop)))))))
      (tensor-dap-driver--emit :event "terminated" :stops stops)
      (unless session
        (tensor-dap-driver--fail "the session terminated without stopping"))
      (let ((proc (dap--debug-session-proc session)))
        (tensor-dap-driver--wait "adapter exit" (lambda () (not (process-live-p proc))))
        (tensor-dap-driver--emit :event "adapter-exited"
                                 :state (symbol-name (dap--debug-session-state session))
                                 :status (symbol-name (process-status proc))))))
  (kill-emacs 0))

(condition-case err
    (tensor-dap-driver--run)
  (error (tensor-dap-driver--fail (format "Lisp error: %S" err))))

;;; dap-mode-driver.el ends here
